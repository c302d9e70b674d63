# Installation: `cmake --install build [--prefix P]` puts upfs under P
# (default CMAKE_INSTALL_PREFIX) so that programs can be built against it:
#
#   bin/upfs                         the tool
#   LIBDIR/libupfs.so.0.1.0          the C API, with the symlinks
#   LIBDIR/libupfs.so.0, libupfs.so  (SONAME, and the link-time name)
#   LIBDIR/libupfs-preload.so        the LD_PRELOAD layer that `upfs run` loads
#   include/upfs/upfs.h              the public header
#   LIBDIR/pkgconfig/upfs.pc         pkg-config --cflags --libs upfs
#   LIBDIR/cmake/upfs/               find_package(upfs): imported target upfs::upfs
#
# LIBDIR is CMAKE_INSTALL_LIBDIR (GNUInstallDirs: lib, lib64 or
# lib/<multiarch>). The static archives (upfs_core, upfs_pmem_lazy) are
# build-internal and not installed. Components: "runtime" (the shared
# libraries and the tool) and "development" (header, link-time symlink,
# pkg-config file, CMake package):
#   cmake --install build --component runtime
#
# Included from the top-level CMakeLists.txt after add_subdirectory(src),
# whose targets it installs.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(UPFS_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/upfs)

# --- libupfs.so ---------------------------------------------------------------
# libpmem and the C++ runtime are NEEDED entries of libupfs.so (linked
# privately): a consumer links only -lupfs, and needs libpmem's runtime
# library, not its development files. The include directory is added to the
# exported target only, so that upfs::upfs carries it.
install(TARGETS upfs EXPORT upfsTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT runtime
          NAMELINK_COMPONENT development
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/upfs/upfs.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/upfs
  COMPONENT development)

# Projects that add upfs with add_subdirectory() can use the same name as
# those that find the installed package.
add_library(upfs::upfs ALIAS upfs)

# --- the tool and the preload library -----------------------------------------
install(TARGETS upfs_preload
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  COMPONENT runtime)
if(TARGET upfs_cli)
  install(TARGETS upfs_cli
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    COMPONENT runtime)
  # `upfs run` finds libupfs-preload.so relative to its own executable
  # (src/cli/run.cc): in the build tree bin/../lib, once installed
  # BINDIR/../LIBDIR, which is not ../lib for lib64 or multiarch LIBDIRs.
  file(RELATIVE_PATH upfs_libdir_from_bindir
       ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  target_compile_definitions(upfs_cli PRIVATE
    UPFS_LIBDIR_FROM_BINDIR="${upfs_libdir_from_bindir}")
endif()

# --- upfs.pc ------------------------------------------------------------------
# Relocatable: prefix is found from the .pc file's own directory, so that
# `cmake --install --prefix P` gives a correct file for any P. libpmem,
# ISA-L and the C++ runtime matter only for static linking, which would need them
# spelled out (no static libupfs is installed today).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(UPFS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(UPFS_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH upfs_pc_up /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
  string(REGEX REPLACE "/$" "" upfs_pc_up "${upfs_pc_up}")  # ../.. not ../../
  set(UPFS_PC_PREFIX "\${pcfiledir}/${upfs_pc_up}")
  set(UPFS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(UPFS_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(UPFS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/upfs.pc @ONLY CONTENT [=[
prefix=@UPFS_PC_PREFIX@
exec_prefix=${prefix}
libdir=@UPFS_PC_LIBDIR@
includedir=@UPFS_PC_INCLUDEDIR@

Name: upfs
Description: Userspace file system for persistent memory (C API)
Version: @PROJECT_VERSION@
Requires.private: libpmem libisal
Libs: -L${libdir} -lupfs
Libs.private: -lstdc++ -lpthread
Cflags: -I${includedir}
]=])
install(FILES ${PROJECT_BINARY_DIR}/upfs.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT development)

# --- CMake package ------------------------------------------------------------
# upfs::upfs has no link dependencies of its own to find (libpmem is
# private), so the config file only loads the exported targets.
install(EXPORT upfsTargets
  NAMESPACE upfs::
  DESTINATION ${UPFS_CMAKE_PACKAGE_DIR}
  COMPONENT development)
file(WRITE ${PROJECT_BINARY_DIR}/upfsConfig.cmake [=[
# upfs CMake package. find_package(upfs) defines the imported target
# upfs::upfs: libupfs.so, with the directory of <upfs/upfs.h>.
include("${CMAKE_CURRENT_LIST_DIR}/upfsTargets.cmake")
]=])
# One SONAME (libupfs.so.0) for all 0.x releases: find_package(upfs 0.x)
# accepts any installed 0.y >= 0.x.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/upfsConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/upfsConfig.cmake
  ${PROJECT_BINARY_DIR}/upfsConfigVersion.cmake
  DESTINATION ${UPFS_CMAKE_PACKAGE_DIR}
  COMPONENT development)
