#!/usr/bin/env bash
# coreutils (and tar, gzip, sed) on upfs: round trips into UPFS_DIR and back
# out must be byte-identical, and every result must equal the same command
# on a plain /dev/shm directory. tests/preload_test.sh covers basic cp, cat
# and dd; this adds trees (tar, also through gzip and with sparse files;
# cp -a), dd's conversions and flags, and the tools that replace files
# (sed -i, sort -o, install, mv) or append to them (tee -a, >>).
# Usage: coreutils.sh PATH/TO/upfs     (ctest label "apps")
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
apps_init coreutils "${1:-}"
PY=/usr/bin/python3
need tar gzip xz cp cat dd sed sort split uniq tee install cmp diff sha256sum truncate "$PY"

scale=1
[ "$LONG" = 1 ] && scale=10

# A deterministic source tree outside UPFS_DIR: many sizes around the 4 KiB
# block size, empty files, a sparse file, nested dirs, a symlink, a hard link.
SRC=$OUT/tree
"$PY" - "$SRC" "$scale" <<'PY'
import os, random, sys
root, scale = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
sizes = [0, 1, 511, 512, 4095, 4096, 4097, 8191, 65536, 65537, 1 << 20, 3 * (1 << 20) + 17]
for d in range(4):
    for s in range(3):
        p = os.path.join(root, "d%d" % d, "sub%d" % s)
        os.makedirs(p, exist_ok=True)
        for i, size in enumerate(sizes):
            if (d + s + i) % 3 == 0 or size < 100000:
                with open(os.path.join(p, "f%02d.bin" % i), "wb") as f:
                    f.write(rng.randbytes(size * (scale if size > 1000 else 1)))
with open(os.path.join(root, "text.txt"), "w") as f:
    for i in range(20000 * scale):
        f.write("line %07d %s\n" % (rng.randrange(10**7), "x" * rng.randrange(40)))
# A sparse file: data at 0, a hole, data at 1 MiB + 100, a hole at the end.
with open(os.path.join(root, "sparse.bin"), "wb") as f:
    f.write(b"A" * 5000)
    f.seek((1 << 20) + 100)
    f.write(b"B" * 7000)
    f.truncate(8 << 20)
os.symlink("text.txt", os.path.join(root, "link.txt"))
os.link(os.path.join(root, "d0", "sub0", "f11.bin") if os.path.exists(os.path.join(root, "d0", "sub0", "f11.bin"))
        else os.path.join(root, "text.txt"), os.path.join(root, "hard.bin"))
PY
[ -d "$SRC" ] || die "cannot make the source tree"
treesum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64); }
SRCSUM=$(treesum "$SRC")

# ---------------------------------------------------------------- tar
tar_trips() {
  local z
  for z in "" z; do
    local name=tar${z:+-gz}
    run tar c${z}f "$UP/$name.tar" -C "$SRC" .
    tar c${z}f "$PL/$name.tar" -C "$SRC" .
    check "tar c${z}f into DIR: archive is a upfs file" is_upfs "$UP/$name.tar"
    if [ -z "$z" ]; then
      check "tar cf into DIR: archive identical to plain's" cmp "$PL/$name.tar" <(run cat "$UP/$name.tar")
    else
      check "tar czf into DIR: decompresses as plain's" same \
        "$(run gzip -dc "$UP/$name.tar" | digest)" "$(gzip -dc "$PL/$name.tar" | digest)"
    fi
    check "tar t${z}vf listing as on plain" same "$(run tar t${z}vf "$UP/$name.tar" | digest)" "$(tar t${z}vf "$PL/$name.tar" | digest)"
    mkdir -p "$UP/x-$name" "$OUT/back-$name"
    check "tar x${z}f of a upfs archive into DIR" run tar x${z}f "$UP/$name.tar" -C "$UP/x-$name"
    check "tar x${z}f: extracted tree equals the source (read under upfs)" same \
      "$(run bash -c "$(declare -f treesum); treesum '$UP/x-$name'")" "$SRCSUM"
    check "tar x${z}f: extracted files are upfs files" is_upfs "$UP/x-$name/d1/sub1/f10.bin"
    # and back out of DIR
    run tar c${z}f "$OUT/back-$name.tar" -C "$UP/x-$name" .
    check "tar c${z}f of the upfs tree to outside DIR: plain archive" bash -c "! head -c4 '$OUT/back-$name.tar' | grep -q UPFS"
    tar x${z}f "$OUT/back-$name.tar" -C "$OUT/back-$name"
    check "tar round trip DIR -> outside: byte-identical tree" same "$(treesum "$OUT/back-$name")" "$SRCSUM"
    check "tar round trip: diff -r with the source" diff -r --no-dereference "$SRC" "$OUT/back-$name"
  done
  # Sparse files: tar -S detects holes (SEEK_HOLE/SEEK_DATA, or zero blocks).
  run tar cSf "$UP/sparse.tar" -C "$SRC" sparse.bin
  tar cSf "$PL/sparse.tar" -C "$SRC" sparse.bin
  mkdir -p "$UP/x-sparse"
  run tar xSf "$UP/sparse.tar" -C "$UP/x-sparse"
  check "tar -S: sparse file round trip" same "$(run cat "$UP/x-sparse/sparse.bin" | digest)" "$(digest <"$SRC/sparse.bin")"
  check "tar -S: upfs archive lists as plain's" same "$(run tar tvf "$UP/sparse.tar")" "$(tar tvf "$PL/sparse.tar")"
  check "tar -S: size via stat" same "$(run stat -c %s "$UP/x-sparse/sparse.bin")" "$(stat -c %s "$SRC/sparse.bin")"
}
timed "tar round trips" tar_trips

# ---------------------------------------------------------------- cp
cp_trips() {
  check "cp -a tree into DIR" run cp -a "$SRC" "$UP/cp-a"
  check "cp -a: tree equals the source" same "$(run bash -c "$(declare -f treesum); treesum '$UP/cp-a'")" "$SRCSUM"
  check "cp -a: hard link kept" same "$(stat -c %h "$UP/cp-a/hard.bin")" "2"
  check "cp -a: symlink kept" same "$(readlink "$UP/cp-a/link.txt")" "text.txt"
  check "cp -a: files are upfs files" is_upfs "$UP/cp-a/d2/sub2/f11.bin"
  check "cp -a tree back out of DIR" run cp -a "$UP/cp-a" "$OUT/cp-back"
  check "cp -a round trip: byte-identical tree" same "$(treesum "$OUT/cp-back")" "$SRCSUM"
  check "cp -a round trip: diff -r" diff -r --no-dereference "$SRC" "$OUT/cp-back"
  local s
  for s in always never auto; do
    run cp --sparse=$s "$SRC/sparse.bin" "$UP/sparse-$s.bin"
    check "cp --sparse=$s into DIR" same "$(run cat "$UP/sparse-$s.bin" | digest)" "$(digest <"$SRC/sparse.bin")"
  done
  run cp --reflink=auto "$UP/sparse-always.bin" "$UP/reflink.bin"
  check "cp --reflink=auto within DIR (copy_file_range refused, read/write used)" \
    same "$(run cat "$UP/reflink.bin" | digest)" "$(digest <"$SRC/sparse.bin")"
  check "cp within DIR: result is a upfs file, fsck clean" fsck_clean "$UP/reflink.bin"
}
timed "cp round trips" cp_trips

# ---------------------------------------------------------------- dd
dd_both() {
  # dd_both NAME ARGS...: the same dd into $UP/NAME (under upfs) and
  # $PL/NAME; compares the results.
  local name=$1
  shift
  run dd "$@" of="$UP/$name" status=none 2>"$OUT/dd.err"
  local rcu=$?
  dd "$@" of="$PL/$name" status=none 2>/dev/null
  local rcp=$?
  check "dd $* (exit $rcu, plain $rcp)" same \
    "$rcu $(run cat "$UP/$name" | digest) $(run stat -c %s "$UP/$name")" \
    "$rcp $(digest <"$PL/$name") $(stat -c %s "$PL/$name")"
}
dd_trips() {
  local big=$SRC/d0/sub0/f11.bin
  [ -f "$big" ] || big=$SRC/text.txt
  dd_both dd1 if="$big" bs=4096 conv=fsync
  dd_both dd2 if="$big" bs=1000 oflag=dsync count=300
  dd_both dd3 if="$big" bs=65536 oflag=sync
  dd_both dd4 if="$big" bs=1M conv=fdatasync
  dd_both dd5 if="$big" bs=4096 skip=10 count=100 iflag=skip_bytes,count_bytes
  dd_both dd6 if="$SRC/sparse.bin" bs=4096 conv=sparse
  dd_both dd1 if="$SRC/text.txt" bs=777 seek=5000 conv=notrunc
  dd_both dd1 if="$SRC/text.txt" bs=4096 count=3 oflag=append conv=notrunc
  dd_both dd7 if=/dev/zero bs=1 count=1 seek=12345678
  dd_both dd2 if=/dev/zero bs=4096 count=2 seek=1 # truncates after the write
  # dd reading a upfs file with odd offsets, to stdout
  check "dd if=upfs file skip/count to a pipe" same \
    "$(run dd if="$UP/dd1" bs=333 skip=7 count=999 status=none | digest)" \
    "$(dd if="$PL/dd1" bs=333 skip=7 count=999 status=none | digest)"
}
timed "dd conversions and flags" dd_trips

# ------------------------------------------ replace, append, split, sort
misc() {
  local t=$SRC/text.txt
  run cp "$t" "$UP/sed.txt"
  cp "$t" "$PL/sed.txt"
  run sed -i 's/line 0/LINE 0/; 3~7d' "$UP/sed.txt"
  sed -i 's/line 0/LINE 0/; 3~7d' "$PL/sed.txt"
  check "sed -i (temp file renamed over a upfs file)" same "$(run cat "$UP/sed.txt" | digest)" "$(digest <"$PL/sed.txt")"
  check "sed -i result is a upfs file" is_upfs "$UP/sed.txt"
  run sort -o "$UP/sorted.txt" "$t"
  sort -o "$PL/sorted.txt" "$t"
  check "sort -o into DIR: output is a upfs file, fsck clean" fsck_clean "$UP/sorted.txt"
  check "sort -o into DIR" same "$(run cat "$UP/sorted.txt" | digest)" "$(digest <"$PL/sorted.txt")"
  run sort -o "$UP/sorted.txt" -r "$UP/sorted.txt"
  sort -o "$PL/sorted.txt" -r "$PL/sorted.txt"
  check "sort -o in place on a upfs file" same "$(run cat "$UP/sorted.txt" | digest)" "$(digest <"$PL/sorted.txt")"
  # uniq IN OUT opens OUT with freopen(OUT, "w", stdout).
  run uniq -c "$t" "$UP/uniq.txt"
  uniq -c "$t" "$PL/uniq.txt"
  check "uniq IN OUT into DIR (freopen of stdout)" same "$(run cat "$UP/uniq.txt" | digest)" "$(digest <"$PL/uniq.txt")"
  check "uniq IN OUT: output is a upfs file" is_upfs "$UP/uniq.txt"
  mkdir -p "$UP/split" "$PL/split"
  run split -b 100000 -d "$t" "$UP/split/part."
  split -b 100000 -d "$t" "$PL/split/part."
  check "split into DIR: same parts" same "$(cd "$UP/split" && run sha256sum part.* | digest)" "$(cd "$PL/split" && sha256sum part.* | digest)"
  run sh -c "cat '$UP'/split/part.* > '$UP/joined.txt'"
  check "cat parts > file in DIR: equals the original" cmp "$t" <(run cat "$UP/joined.txt")
  run sh -c "for i in 1 2 3 4 5; do echo 'appended '\$i >> '$UP/joined.txt'; done; printf tail | tee -a '$UP/joined.txt' >/dev/null"
  sh -c "cat '$t' > '$PL/joined.txt'; for i in 1 2 3 4 5; do echo 'appended '\$i >> '$PL/joined.txt'; done; printf tail | tee -a '$PL/joined.txt' >/dev/null"
  check ">> and tee -a on a upfs file" same "$(run cat "$UP/joined.txt" | digest)" "$(digest <"$PL/joined.txt")"
  run install -m 640 "$t" "$UP/installed.txt"
  # The mode as programs see it under upfs (outside, the host file also
  # shows the upfs marker, S_ISVTX: 1640).
  check "install -m 640 into DIR" same "$(run stat -c %a "$UP/installed.txt") $(run cat "$UP/installed.txt" | digest)" "640 $(digest <"$t")"
  check "install -m 640: the host file carries the marker" same "$(stat -c %a "$UP/installed.txt")" "1640"
  run mv "$UP/installed.txt" "$UP/moved.txt"
  check "mv within DIR keeps the upfs file" same "$(run cat "$UP/moved.txt" | digest)" "$(digest <"$t")"
  check "head -c / tail -c of a upfs file" same \
    "$(run head -c 123457 "$UP/moved.txt" | digest) $(run tail -c 54321 "$UP/moved.txt" | digest)" \
    "$(head -c 123457 "$t" | digest) $(tail -c 54321 "$t" | digest)"
  run truncate -s 100000 "$UP/moved.txt"
  run truncate -s +5000 "$UP/moved.txt"
  cp "$t" "$PL/moved.txt"; truncate -s 100000 "$PL/moved.txt"; truncate -s +5000 "$PL/moved.txt"
  check "truncate shrink and grow" same "$(run cat "$UP/moved.txt" | digest)" "$(digest <"$PL/moved.txt")"
  # gzip/xz in place: a new compressed file, the original unlinked; and back.
  local z
  for z in gzip xz; do
    run cp "$t" "$UP/c-$z.txt"
    run $z "$UP/c-$z.txt"
    check "$z in place: compressed file is a upfs file" is_upfs "$UP/c-$z.txt.$([ $z = gzip ] && echo gz || echo xz)"
    run $z -d "$UP/c-$z.txt.$([ $z = gzip ] && echo gz || echo xz)"
    check "$z -d in place: round trip byte-identical" cmp "$t" <(run cat "$UP/c-$z.txt")
  done
  check "wc of a upfs file" same "$(run wc < "$UP/joined.txt")" "$(wc < "$PL/joined.txt")"
}
timed "sed -i, sort -o, split, >>, tee -a, install, mv, truncate" misc

# Data files (not the sparse source's holes) are upfs files, fsck clean.
upfs_files "coreutils files under UPFS_DIR" "$UP" 100
finish
