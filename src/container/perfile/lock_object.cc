#include "container/perfile/lock_object.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace upfs {

namespace {

constexpr char kShmDir[] = "/dev/shm";
constexpr char kPrefix[] = "upfs-";
constexpr char kSuffix[] = ".lock";

std::string NameOf(uint64_t dev, uint64_t ino) {
  char buf[80];
  std::snprintf(buf, sizeof(buf), "/%s%" PRIx64 "-%" PRIx64 "%s", kPrefix, dev, ino, kSuffix);
  return buf;
}

int Flock(int fd, int op) {
  int r;
  do {
    r = flock(fd, op);
  } while (r != 0 && errno == EINTR);
  return r;
}

// Removes `name` if fd (a description of it) can lock it exclusively, that
// is, if no other description holds a lock. Then closes fd.
bool RemoveIfUnlocked(const std::string& name, int fd) {
  bool removed = false;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    // Only if the name still is this object (not a newer one).
    struct stat mine, named;
    std::string path = kShmDir + name;
    if (fstat(fd, &mine) == 0 && fstatat(AT_FDCWD, path.c_str(), &named, 0) == 0 &&
        mine.st_ino == named.st_ino && mine.st_dev == named.st_dev)
      removed = shm_unlink(name.c_str()) == 0;
  }
  close(fd);
  return removed;
}

}  // namespace

int FlockLockObject(dev_t dev, ino_t ino, int* fd, int op) {
  const std::string name = NameOf(uint64_t(dev), uint64_t(ino));
  for (;;) {
    if (*fd < 0) {
      *fd = shm_open(name.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0444);
      if (*fd < 0) return -1;
      (void)fchmod(*fd, 0444);  // whatever the creator's umask (fails unless ours)
    }
    if (Flock(*fd, op) != 0) return -1;
    if (op & LOCK_UN) return 0;
    struct stat st;
    if (fstat(*fd, &st) != 0) return -1;
    if (st.st_nlink > 0) return 0;
    // Its last user removed it while we waited: a lock on it excludes
    // nobody. Lock the current one.
    close(*fd);
    *fd = -1;
  }
}

void ReleaseLockObject(dev_t dev, ino_t ino, int fd) {
  if (fd < 0) return;
  RemoveIfUnlocked(NameOf(uint64_t(dev), uint64_t(ino)), fd);
}

Status SweepLockObjects(uint32_t* removed, uint32_t* in_use) {
  DIR* d = opendir(kShmDir);
  if (!d) return Status::FromErrno(std::string("opendir ") + kShmDir);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    uint64_t dev, ino;
    char tail[8] = {0};
    if (std::strncmp(e->d_name, kPrefix, sizeof(kPrefix) - 1) == 0 &&
        std::sscanf(e->d_name + sizeof(kPrefix) - 1, "%" SCNx64 "-%" SCNx64 "%7s", &dev, &ino,
                    tail) == 3 &&
        std::strcmp(tail, kSuffix) == 0)
      names.push_back(NameOf(dev, ino));
  }
  closedir(d);
  for (const std::string& name : names) {
    int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) continue;
    if (RemoveIfUnlocked(name, fd))
      ++*removed;
    else
      ++*in_use;
  }
  return Status::OK();
}

}  // namespace upfs
