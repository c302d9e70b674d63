/* The part of the preload library's start-up that uses the engine: it must
 * run after upfs_core's C++ static initializers, so this constructor lives
 * in a library linked after upfs_core (see CMakeLists.txt). */
void upfs_preload_late_init(void);

__attribute__((constructor)) static void upfs_preload_late(void) { upfs_preload_late_init(); }
