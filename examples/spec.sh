#!/usr/bin/env bash
# Print an example's job spec with its placeholders filled in, ready for `corral submit -`:
#
#   examples/spec.sh examples/serving/job.yaml | corral submit - --wait
#   examples/spec.sh examples/batch_predict/job.yaml points=job-01m8...:points | corral submit - --wait
#
# {python} becomes this checkout's virtualenv Python (it has torch: `make up` installs it;
# $PYTHON names another), {examples} this directory, and each KEY=VALUE argument fills
# {KEY}. Paths are quoted for the task's shell: a checkout's path may hold spaces.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 SPEC.yaml [KEY=VALUE...]" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
spec="$1"
shift
fill=(-e "s#{python}#'${PYTHON:-$repo/.venv/bin/python}'#g" -e "s#{examples}#'$here'#g")
for pair in "$@"; do
  case "$pair" in
    *=*) fill+=(-e "s#{${pair%%=*}}#${pair#*=}#g") ;;
    *) echo "$0: $pair is not KEY=VALUE" >&2; exit 2 ;;
  esac
done
text="$(sed "${fill[@]}" "$spec")"
if grep -q '{[a-z_]*}' <<<"$text"; then
  echo "$0: $spec still has $(grep -o '{[a-z_]*}' <<<"$text" | sort -u | tr '\n' ' ')- give KEY=VALUE for each" >&2
  exit 2
fi
printf '%s\n' "$text"
