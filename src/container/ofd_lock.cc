#include "container/ofd_lock.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

namespace upfs {

namespace {

struct flock ByteLock(short type, off_t start) {
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = 1;
  return fl;
}

}  // namespace

int OfdLockByte(int fd, short type, off_t start, bool wait) {
  struct flock fl = ByteLock(type, start);
  int rc;
  do {
    rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

bool OfdByteHeldElsewhere(int fd, off_t start) {
  struct flock fl = ByteLock(F_WRLCK, start);
  return fcntl(fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK;
}

}  // namespace upfs
