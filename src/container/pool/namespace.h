// PoolNamespace: the POSIX namespace operations of one pool, in the
// caller's thread: path resolution over the DRAM index, permission checks
// against the caller's credentials, and each change committed as one
// record of the namespace log (validate against every record before it,
// CAS at the tail, retry when another process got there first).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "container/pool/listing.h"
#include "container/pool/parent_cache.h"
#include "container/pool/pool.h"
#include "util/assert.h"
#include "util/function_ref.h"
#include "util/status.h"

namespace upfs {

class CommitFlushes;  // namespace_internal.h

// Who is asking: effective ids for every check, real ids for access().
struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  mode_t umask = 022;
  // The kernel's link protections as the system has them set
  // (/proc/sys/fs/protected_hardlinks, _symlinks, _regular), which it
  // applies to every caller: a hard link to a file the caller neither
  // owns nor may read and write, and following another user's symbolic
  // link in a sticky world-writable directory, are refused.
  bool protected_hardlinks = false;
  bool protected_symlinks = false;
  // protected_regular (0, 1 or 2): an open with O_CREAT of another user's
  // existing file in a sticky directory, world-writable (1) or also
  // group-writable (2), is refused.
  int protected_regular = 0;
  bool InGroup(gid_t g) const;
  // The process's ids, groups and umask, and the system's protections.
  static Credentials Current(bool real);
};

// A path's last component, held inline (a name is at most kMaxNameLen
// bytes, which resolution checks before it keeps one): every lookup keeps
// the name it ends at, and a std::string's assign and destruction cost
// 83 of a stat's 1,790 instructions (callgrind, a stat of a file in a
// directory of the pool: 1,707 with this).
class ComponentName {
 public:
  ComponentName() = default;
  ComponentName(std::string_view s) { assign(s); }  // NOLINT: as a string's
  ComponentName(const char* s) : ComponentName(std::string_view(s)) {}  // NOLINT
  void assign(std::string_view s) {
    UPFS_ASSERT(s.size() <= format::pool::kMaxNameLen);
    len_ = uint16_t(s.size());
    std::memcpy(bytes_, s.data(), s.size());
  }
  void clear() { len_ = 0; }
  bool empty() const { return len_ == 0; }
  size_t size() const { return len_; }
  const char* data() const { return bytes_; }
  std::string_view view() const { return {bytes_, len_}; }
  operator std::string_view() const { return view(); }  // NOLINT: a name is used as a view

 private:
  uint16_t len_ = 0;
  char bytes_[format::pool::kMaxNameLen];
};

// The end of a path resolution.
struct Resolved {
  uint64_t dir = 0;       // the directory that holds the last component
  ComponentName name;     // the last component ("" for the root)
  uint64_t ino = 0;       // 0: the last component does not exist
  format::pool::FileType type{};
  // The index's view (NsLog::view) when Resolve found this: while the view
  // is still that one, the index says what it said then, and a commit's
  // checks of the names need not look again (see SameView).
  uint64_t seen = 0;
  // Nonzero: the directory came from the parent cache, not from a walk,
  // and a commit in it holds only while the index's shape() is this one
  // and the directory's inode ident is dir_ident (ParentCache).
  uint64_t shape = 0;
  uint64_t dir_ident = 0;
};

// Which paths of a rename ended in a slash.
struct RenameSlashes {
  bool from = false, to = false;
};

class PoolNamespace {
 public:
  PoolNamespace(Pool* pool, const Credentials* who) : pool_(pool), who_(who) {}

  // Resolves `path` (absolute inside the pool: "/" is its root). With
  // `follow`, a symbolic link as the last component is followed. A path
  // that leaves the pool (a symbolic link to an absolute path, or ".."
  // above the root) fails with EXDEV and *escape set to the rest of it,
  // to be resolved by the caller from `mount_dir`. `start`: the directory
  // a relative path starts from (a directory descriptor's inode, which
  // follows the directory through renames, as the kernel's does); 0: the
  // root.
  Status Resolve(std::string_view path, bool follow, Resolved* out, std::string* escape = nullptr,
                 uint64_t start = 0);
  // Resolve, and if the path names an inode, a hold on it as TakeHold's
  // (*held_gen its generation), taken under the lookup's own hold of the
  // index lock when nothing was committed meanwhile: then the lookup's
  // answer is the check TakeHold makes again. *held false with out->ino
  // != 0: that did not hold, and the caller takes the hold (TakeHold).
  Status ResolveHeld(std::string_view path, bool follow, Resolved* out, uint32_t* held_gen, bool* held,
                     std::string* escape = nullptr, uint64_t start = 0);
  // Both paths of a rename, neither's last component followed, under one
  // pin and one hold of the index lock (both in the same view, as
  // SameView needs): path a first, as two Resolve calls would. b in the
  // directory a's walk ended in, when both name it with the same bytes
  // from the same start: only b's last name is looked up (a's walk
  // checked the directory's search permission). An escape (EXDEV) is
  // the path whose *escape is set.
  Status ResolveTwo(std::string_view path_a, uint64_t start_a, Resolved* a, std::string* escape_a,
                    std::string_view path_b, uint64_t start_b, Resolved* b, std::string* escape_b);
  // Tests only: fn(arg) runs in ResolveHeld between the lookup and the
  // hold (the index lock held shared), where a test makes a change from
  // another attachment of the pool. nullptr: nothing runs.
  static void BetweenLookupAndHoldForTest(void (*fn)(void*), void* arg);
  // Tests only: fn(arg) runs in MaybeRelease between its load of the
  // inode's ident and its CAS of it, where a test changes the word as a
  // racing thread would. nullptr: nothing runs.
  static void BeforeReleaseCasForTest(void (*fn)(void*), void* arg);
  // The same, for a caller that is pinned and holds the index lock shared
  // (Pool::LockLatest).
  Status ResolveLocked(std::string_view path, bool follow, Resolved* out, std::string* escape = nullptr,
                       uint64_t start = 0);

  // Creates a regular file (EEXIST if the name exists). With held_gen, the
  // new inode is born held (as TakeHold) and *held_gen is its generation.
  Status Create(const Resolved& at, mode_t mode, format::Consistency c, uint64_t* ino, bool* created,
                uint32_t* held_gen = nullptr);
  // The directory of absolute `path` from this thread's parent cache
  // (ParentCache), without walking to it: *at as Resolve gives it for a
  // name that does not exist (ino 0), but with at->shape and
  // at->dir_ident set, so that a create, mkdir or symbolic link there
  // commits only if no directory moved since the walk that made the entry
  // and the directory is still the one it found. Search permission is
  // checked on that walk's directories. False: no entry, or
  // a permission the walk would refuse (it names the right error).
  bool CachedParent(std::string_view path, Resolved* at);
  // Whether a call made at CachedParent's answer answered for the walk:
  // false for the errors the walk may answer otherwise (the directories
  // moved: ESTALE, which also drops the entry; a permission or a missing
  // name, which the kernel's order of checks may answer with EEXIST);
  // those leave nothing done, and the caller walks.
  bool CacheAnswered(std::string_view path, const Status& st);
  // This object's resolutions start at the directory this thread's parent
  // cache holds for the path (FromKeptParent), and its walks keep the
  // directory they end in (a plain walk from the root) there: for a call
  // that makes, removes or renames a name, whose next one in that
  // directory needs no walk. Stats and opens keep none and look in none:
  // a thread that stats in turn in more directories than the cache holds
  // would pay a miss and a keep on every stat (docs/design.md, "The parent
  // cache").
  void KeepParents() { keep_parents_ = true; }
  // This object's resolutions are an open with O_CREAT's: a last name
  // followed by a slash (in the path, or in the body of a symbolic link
  // that led to it) is EISDIR, before it is looked up, as the kernel's
  // open_last_lookups answers.
  void ForCreate() { for_create_ = true; }
  Status Mkdir(const Resolved& at, mode_t mode);
  Status Symlink(const Resolved& at, std::string_view target);
  Status Link(const Resolved& from, const Resolved& to);
  // Removes a name: a directory if `dir` (rmdir), anything else if not.
  Status Remove(const Resolved& at, bool dir);
  // `slashes`: which of the two paths ended in a slash, which the kernel
  // reads as "must be a directory", in its own order (CheckRename).
  Status Rename(const Resolved& from, const Resolved& to, unsigned flags, RenameSlashes slashes = {});

  // `held`: the caller holds the inode (a descriptor's fstat), which may
  // have no name left.
  Status Stat(uint64_t ino, struct stat* st, bool held = false);
  // Resolve and Stat in one pin and one hold of the index lock.
  Status StatPath(std::string_view path, bool follow, struct stat* st, std::string* escape = nullptr,
                  uint64_t start = 0);
  Status Readlink(uint64_t ino, std::string* target);
  Status Chmod(uint64_t ino, mode_t mode);
  Status Chown(uint64_t ino, uid_t uid, gid_t gid);
  // What a write or truncate does to the mode, as the kernel's
  // file_remove_privs: for a caller other than root, S_ISUID goes, and
  // S_ISGID of a group-executable file or of a group the writer is not in.
  // No ownership asked (the writer had write permission); atomic against a
  // concurrent chmod.
  Status DropSetIdForWrite(uint64_t ino);
  // What an open with O_TRUNC does to a regular file that has no log (no
  // data, nothing to cut): mtime and ctime now, and DropSetIdForWrite, as
  // the kernel's truncate of an empty file.
  Status TruncateEmpty(uint64_t ino);
  // ts[0] atime, ts[1] mtime: UTIME_NOW, UTIME_OMIT, or a time; null: now.
  Status Utimens(uint64_t ino, const struct timespec ts[2], bool held = false);
  // mode: F_OK, or R_OK | W_OK | X_OK against this caller.
  Status Access(uint64_t ino, int mode);
  // Whether the caller may open ino with `acc` (O_RDONLY, ...): EACCES;
  // with O_NOATIME (`noatime`) only as its owner or root: EPERM.
  Status MayOpen(uint64_t ino, int acc, bool trunc, bool noatime = false);
  // Whether an open with O_CREAT may open the existing regular file `ino`
  // in directory `dir` (protected_regular: the kernel's
  // may_create_in_sticky).
  Status MayCreateOver(uint64_t dir, uint64_t ino) const;

  // Takes and gives back a hold on an inode that keeps it (and its blocks)
  // from being freed while a descriptor or a call uses it; TakeHold fails
  // (ENOENT) if the inode has lost its last name meanwhile. With `named`
  // (the resolution that found ino), also if that name no longer leads to
  // ino: the inode may have been freed and made again for another file.
  Status TakeHold(uint64_t ino, uint32_t* gen, const Resolved* named = nullptr);
  void DropHold(uint64_t ino, uint32_t gen);

  // Directory listing: a snapshot of the entries of `dir`, "." and ".."
  // first (Listing: the names in one buffer).
  Status List(uint64_t dir, Listing* out);

 private:
  // tests/pool_api/pool_open_line_test.cc commits records by hand.
  friend struct PoolNamespaceTestAccess;
  Status Permit(const format::pool::Inode* in, int want) const;
  // Whether the walk may follow symbolic link `link`, found in directory
  // inode `din` (protected_symlinks).
  Status MayFollow(const format::pool::Inode* din, uint64_t link) const;
  // Whether the caller may make a hard link to inode `ino` of type `type`
  // (protected_hardlinks: the kernel's may_linkat).
  Status MayLink(uint64_t ino, format::pool::FileType type) const;
  // ResolveLocked's walk of `path` from `start` (0: the root), recording
  // the directories it goes through in *trace (if given).
  Status Walk(std::string_view path, bool follow, Resolved* out, std::string* escape, uint64_t start,
              WalkTrace* trace);
  // ResolveLocked's shortcut (index lock held): *out as the walk of
  // `dir` + "/" + `name` would find it, from the thread's parent cache entry
  // for `dir` while no directory moved and its last one is the life the
  // walk found; false: walk (no entry, a stale one, a search permission
  // denied, or a symbolic link to follow).
  bool FromKeptParent(std::string_view dir, std::string_view name, bool follow, Resolved* out) const;
  // ResolveTwo's shortcut: *b as the name path_b ends in, looked up in
  // a's directory, if path_b names that directory as path_a does (false:
  // walk it).
  bool ResolveSibling(std::string_view path_a, uint64_t start_a, const Resolved& a, std::string_view path_b,
                      uint64_t start_b, Resolved* b) const;
  // The directory a walk from `start` (0: the root) begins in (index lock
  // held): ENOENT if it was removed, ENOTDIR if the inode is no directory.
  Status WalkStart(uint64_t start, uint64_t* cur) const;
  // Rename's checks of its arguments that need no permission (the flags,
  // the names, the kernel's ancestor trap, the types): in the kernel's
  // order, before any permission check.
  Status CheckRename(const Resolved& from, const Resolved& to, unsigned flags, RenameSlashes slashes) const;
  // Rename's permission checks: both directories, the sticky bits, and a
  // moved directory's own (its ".." is rewritten).
  Status PermitRename(const Resolved& from, const Resolved& to, bool exchange) const;
  // Whether `dir` is still a directory of the index, the life of its inode
  // that had `ident` (index lock held).
  bool StillDir(uint64_t dir, uint64_t ident) const;
  // Stat's attributes from the inode and the index (pinned, index lock
  // held); *needs_file: a regular file with a log, whose size, blocks and
  // data ctime its engine File gives (StatFile, without the lock), or its
  // log's stat hint while the inode's ident is still *ident (set here).
  Status StatLocked(uint64_t ino, struct stat* st, bool* needs_file, uint64_t* ident = nullptr) const;
  // `named`: as TakeHold's (a hold that fails its check gives ENOENT).
  // `ident`: the inode's ident StatLocked saw (0: unknown); while it is
  // still that, the size may come from the log's stat hint, without an
  // engine File.
  Status StatFile(uint64_t ino, struct stat* st, bool held, const Resolved* named = nullptr,
                  uint64_t ident = 0);
  // Commits rec once validate() holds at the log's tail. `with_payload`:
  // writes to make durable with the record (NsLog::Reserve), run once,
  // when the first reservation is taken. It stores, and writes back each
  // line it stored through FlushLine: at once in a pool before version 8
  // (the reservation's fence follows), else after the index lock, under
  // MakeDurable's one fence (docs/design.md, "One wait a commit").
  // `touch`: the times the operation changes (TouchDir, TouchCtime), run
  // once the record committed, never for an operation that fails (a
  // failed mkdir or rmdir leaves its directory's times alone, as in the
  // kernel), written back through FlushLine as `with_payload`'s stores and
  // made durable by the same fence, before the call returns.
  // *committed (if given): whether the record committed, even if the call
  // then fails (the index could not apply it: damage); what the record
  // names is then the log's.
  Status Commit(const NsRecord& rec, FunctionRef<Status()> validate,
                FunctionRef<void(CommitFlushes*)> with_payload = {}, bool* committed = nullptr,
                FunctionRef<void(CommitFlushes*)> touch = {});
  // Whether the index is where it was when `r` was resolved (index lock held).
  bool SameView(const Resolved& r) const;
  Status NameStillFree(const Resolved& at) const;
  // Takes an inode for `image` (filled in here); the caller writes it with
  // its record (CommitNewInode).
  Status NewInode(format::pool::FileType kind, uint64_t dir, mode_t mode, uint64_t* ino,
                  format::pool::Inode* image, format::pool::Inode** in);
  // Takes an inode for `image` and commits the record of `type` that
  // names it as `at`, the image written with the record's payload. *ino:
  // the inode taken (0: none), which a failed call leaves written, for the
  // caller to give back unless *committed (the record that names it is in
  // the log, though the call failed). `kept_lines`: the lines of a kept log
  // the image names that were stored and are to be written back with it.
  Status CommitNewInode(format::pool::RecordType type, format::pool::FileType kind, const Resolved& at,
                        mode_t mode, format::pool::Inode* image, uint64_t* ino, bool* committed,
                        uint32_t kept_lines = 0);
  // Sets a directory's mtime and ctime, written back through `later`
  // (FlushLine).
  void TouchDir(uint64_t dir, CommitFlushes* later);
  // Sets ino's ctime; `durable`: written back through `later` (FlushLine)
  // for the next fence (an inode losing its last name needs no durable
  // ctime, and a flush would evict the line that setting its unlinked bit
  // is about to change).
  void TouchCtime(uint64_t ino, bool durable, CommitFlushes* later);
  Status CheckSticky(uint64_t dir, uint64_t ino) const;
  // After a name went: frees the inode if it has no name and no holder.
  void MaybeRelease(uint64_t ino);
  // Whether ino has a name (index lock held, shared).
  bool LinkedLocked(uint64_t ino, const format::pool::Inode* in) const;
  // After a committed removal of an inode's last name (which the removal's
  // check saw under the index lock, at the tail): sets its unlinked bit, for
  // the processes whose index no longer holds that record after a
  // checkpoint.
  void SetUnlinked(uint64_t ino);

  Pool* pool_;
  const Credentials* who_;
  bool keep_parents_ = false;
  bool for_create_ = false;
};

}  // namespace upfs
