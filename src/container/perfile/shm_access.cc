#include "container/perfile/shm_access.h"

#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

namespace upfs {

namespace {

// The Linux xattr form of an access ACL (linux/posix_acl_xattr.h).
constexpr uint32_t kAclVersion = 2;
constexpr uint16_t kUserObj = 0x01, kUser = 0x02, kGroupObj = 0x04, kGroup = 0x08, kMask = 0x10,
                   kOther = 0x20;
constexpr uint32_t kUndefinedId = 0xffffffff;
constexpr char kAclName[] = "system.posix_acl_access";

struct AclEntry {
  uint16_t tag;
  uint16_t perm;
  uint32_t id;
};
static_assert(sizeof(AclEntry) == 8);

// Read and write bits of one class of the host mode, as an ACL perm.
uint16_t Rw(mode_t mode, int shift) { return uint16_t((mode >> shift) & 06); }

}  // namespace

Status GiveHostAccessAtCreation(int fd, const std::string& path, const struct stat& host) {
  // The common case in a few system calls: the creator owns the host file
  // and has its group (root makes them so).
  const uid_t me = geteuid();
  const gid_t group = getegid();
  if (me == 0 && (host.st_uid != 0 || host.st_gid != group) &&
      fchown(fd, host.st_uid, host.st_gid) != 0)
    return Status::FromErrno("chown " + path);
  if (me == 0 || (me == host.st_uid && group == host.st_gid)) {
    if ((host.st_mode & 0666) != 0600 && fchmod(fd, host.st_mode & 0666) != 0)
      return Status::FromErrno("chmod " + path);
    return Status::OK();
  }
  return GiveHostAccess(path, host);
}

Status GiveHostAccess(const std::string& path, const struct stat& host) {
  const uid_t me = geteuid();
  struct stat obj;
  if (fstatat(AT_FDCWD, path.c_str(), &obj, 0) != 0) return Status::FromErrno("stat " + path);
  if (me != 0 && me != obj.st_uid) return Status::OK();  // not ours to change
  // The host file's group where this user may give it (root, or a member).
  if (obj.st_gid != host.st_gid && chown(path.c_str(), uid_t(-1), host.st_gid) == 0)
    obj.st_gid = host.st_gid;
  const mode_t mode = host.st_mode;
  if (obj.st_uid == host.st_uid && obj.st_gid == host.st_gid) {
    // Exactly the host file's: the mode says it all.
    (void)removexattr(path.c_str(), kAclName);
    if (chmod(path.c_str(), mode & 0666) != 0) return Status::FromErrno("chmod " + path);
    return Status::OK();
  }
  std::vector<AclEntry> acl;
  acl.push_back({kUserObj, 06, kUndefinedId});  // the creator, a writer
  if (obj.st_uid != host.st_uid) acl.push_back({kUser, Rw(mode, 6), uint32_t(host.st_uid)});
  if (obj.st_gid == host.st_gid) {
    acl.push_back({kGroupObj, Rw(mode, 3), kUndefinedId});
  } else {
    // The object's group is the creator's: its members are others to the
    // host file, unless they are in the host file's group too.
    acl.push_back({kGroupObj, Rw(mode, 0), kUndefinedId});
    acl.push_back({kGroup, Rw(mode, 3), uint32_t(host.st_gid)});
  }
  acl.push_back({kMask, 06, kUndefinedId});
  acl.push_back({kOther, Rw(mode, 0), kUndefinedId});
  std::vector<unsigned char> xattr(4 + acl.size() * sizeof(AclEntry));
  std::memcpy(xattr.data(), &kAclVersion, 4);
  std::memcpy(xattr.data() + 4, acl.data(), acl.size() * sizeof(AclEntry));
  if (setxattr(path.c_str(), kAclName, xattr.data(), xattr.size(), 0) == 0) return Status::OK();
  // No ACLs on this file system: the creator's write access, the host
  // file's group and other bits.
  if (chmod(path.c_str(), (mode & 0066) | 0600) != 0) return Status::FromErrno("chmod " + path);
  return Status::OK();
}

}  // namespace upfs
