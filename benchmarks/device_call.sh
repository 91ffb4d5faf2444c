#!/usr/bin/env bash
# What every device call's script (benchmarks/results/*/callN/cN.sh) does first: source it in the repo root, with
# $OUT set (the device tool's output folder).
#   . benchmarks/device_call.sh
# It sets up the machine (gpu_setup.sh, its output in /tmp/logs/setup.log), starts the call's clock and defines:
#   el MESSAGE                 "[seconds since the start] MESSAGE", to stdout and $OUT/steps.log
#   left SECONDS               the seconds from now until SECONDS after the start (at least 1): a step's timeout
#   build NAME DIR             the project tree in DIR installed into /tmp/NAME (a system for latency_ab.py --system)
#   build_archive NAME TAR_GZ  a `git archive` of the project (scratch/*.tar.gz), built as NAME
#   worktree_copy NAME         this checkout's project files copied to /tmp/src-NAME (to edit before a build)
#   build_worktree NAME        this checkout's project files, built as NAME
#   variant NAME FILE OLD NEW  this checkout's project files with OLD replaced by NEW in FILE (OLD must occur exactly
#                              once: a variant never builds from a stale edit), built as NAME
#   apply_patch ROOT PATCH     a unified diff (git diff) applied to the files under ROOT (this checkout: "."); each
#                              hunk's old lines must occur exactly once in its file (no stale patch); new files made
#   patched NAME PATCH         this checkout's project files with a unified diff applied (apply_patch), built as NAME
#                              (build, build_worktree, variant and patched return non-zero where the build failed:
#                              a script adds a system only if it was built; else latency_ab.py would time this
#                              checkout's editable install under the variant's name)
#   latency_step SECONDS MODEL SYSTEM...
#                              latency_ab.py on MODEL at 1 x 16 and 1 x 128 tokens, attention triton, 3 rounds of the
#                              SYSTEMs (names built above) alternated, until SECONDS after the start: $OUT/ab-MODEL,
#                              the table's last lines logged
#   pytest_step NAME SECONDS PYTEST-ARGS...
#                              pytest until SECONDS after the start: its last line and failures logged
#                              (/tmp/logs/t-NAME.log)
#   pack_logs                  /tmp/logs into $OUT/logs.tar.gz (the call's last step)
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
# at least 1: `timeout 0` would mean no limit
left() { local t=$(( $1 - ($(date +%s) - T0) )); echo $(( t < 1 ? 1 : t )); }
build() {
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1
  local rc=$?
  el "build $1 rc=$rc"
  return $rc
}
build_archive() { mkdir -p /tmp/src-$1 && tar -xzf $2 -C /tmp/src-$1 && build $1 /tmp/src-$1; }
worktree_copy() { mkdir -p /tmp/src-$1 && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-$1/; }
build_worktree() { worktree_copy $1 && build $1 /tmp/src-$1; }
variant() {
  worktree_copy $1 && python3 - /tmp/src-$1/$2 "$3" "$4" <<'PY' && build $1 /tmp/src-$1
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: the text to replace occurs {text.count(old)} times, not once: {old!r}")
open(path, "w").write(text.replace(old, new))
PY
  local rc=$?
  [ $rc = 0 ] || el "variant $1 not built"
  return $rc
}
apply_patch() {  # a new file (--- /dev/null) is written whole
  python3 - "$1" "$2" <<'PY'
import os, re, sys
root, patch = sys.argv[1:]
for section in re.split(r"^diff --git ", open(patch).read(), flags=re.M)[1:]:
    path = f"{root}/" + re.search(r"^\+\+\+ b/(\S+)", section, re.M).group(1)
    created = re.search(r"^--- /dev/null$", section, re.M) is not None
    text = "" if created else open(path).read()
    for hunk in re.split(r"^@@[^\n]*\n", section, flags=re.M)[1:]:
        lines = [l for l in hunk.split("\n") if l[:1] in (" ", "-", "+")]
        old = "".join(l[1:] + "\n" for l in lines if l[0] in " -")
        new = "".join(l[1:] + "\n" for l in lines if l[0] in " +")
        if created:
            text += new
        elif text.count(old) != 1:
            sys.exit(f"{path}: a hunk's old lines occur {text.count(old)} times, not once:\n{old}")
        else:
            text = text.replace(old, new)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").write(text)
PY
}
patched() {
  worktree_copy $1 && apply_patch /tmp/src-$1 "$2" && build $1 /tmp/src-$1
  local rc=$?
  [ $rc = 0 ] || el "patched $1 not built"
  return $rc
}
latency_step() {
  local deadline=$1 model=$2
  shift 2
  (cd benchmarks && timeout $(left $deadline) python3 latency_ab.py --out $OUT/ab-$model \
    $(for s in "$@"; do echo --system $s=/tmp/$s; done) --models $model --lengths 16,128 --attention triton --rounds 3 \
    > /tmp/logs/latency-$model.log 2>&1)
  el "latency ab $model rc=$?"
  tail -4 /tmp/logs/latency-$model.log >> $OUT/steps.log
}
pytest_step() {
  local name=$1 deadline=$2
  shift 2
  timeout $(left $deadline) python3 -m pytest -q -rfE -p no:cacheprovider "$@" > /tmp/logs/t-$name.log 2>&1
  el "$name tests rc=$? $(tail -1 /tmp/logs/t-$name.log)"
  grep -E "^(FAILED|ERROR)" /tmp/logs/t-$name.log | head -12 | tee -a $OUT/steps.log
}
pack_logs() { tar -czf $OUT/logs.tar.gz -C /tmp logs; }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
