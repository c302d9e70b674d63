# What the tool's smoke tests share (sourced; $DIR must be set): counting
# passes and failures, and checking a command's exit code and output.
failures=0
passes=0

ok() { passes=$((passes + 1)); echo "ok: $*"; }
bad() { failures=$((failures + 1)); echo "FAIL: $*"; }

# expect CODE DESCRIPTION CMD...: runs CMD, checks its exit code; its
# stdout+stderr are kept in $DIR/out.
expect() {
  local want="$1" what="$2"
  shift 2
  "$@" >"$DIR/out" 2>&1
  local got=$?
  if [ "$got" = "$want" ]; then
    ok "$what (exit $got)"
  else
    bad "$what: exit $got, expected $want; output:"
    sed 's/^/    /' "$DIR/out"
  fi
}

# contains TEXT DESCRIPTION: checks that the last command's output has TEXT.
contains() {
  if grep -qF -- "$1" "$DIR/out"; then ok "$2"; else
    bad "$2: output lacks '$1'; output:"
    sed 's/^/    /' "$DIR/out"
  fi
}

# summary: the last line, and the exit code of the test.
summary() {
  echo
  echo "$passes passed, $failures failed"
  [ "$failures" = 0 ]
}
