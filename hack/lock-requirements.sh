#!/usr/bin/env bash
# Re-pin requirements/runtime.txt and requirements/test.txt from pyproject.toml:
# resolve [project] dependencies (the image), then the `test` extra on top,
# each in a throwaway virtualenv, and write what pip installed, exactly.
# The pins already there hold unless --upgrade is given (so adding one
# dependency moves nothing else).
#   hack/lock-requirements.sh [--upgrade]   (PYTHON=python3.11 to choose the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m venv "$work/venv"
pip=("$work/venv/bin/pip" --quiet --disable-pip-version-check)
freeze() { "$work/venv/bin/pip" freeze --exclude-editable | grep -v -e '^nodewarden' -e '^#' | sort -f; }

constraints=()
if [[ "${1:-}" != "--upgrade" ]]; then
  # pip takes no extras in a constraint.
  cat requirements/runtime.txt requirements/test.txt 2>/dev/null | grep -v -e '^#' -e '^-r' \
    | sed 's/\[[^]]*\]//' > "$work/constraints"
  constraints=(-c "$work/constraints")
fi

"${pip[@]}" install "${constraints[@]}" .
freeze > "$work/runtime"
"${pip[@]}" install "${constraints[@]}" '.[test]'
freeze > "$work/all"

{
  echo "# The hook server's runtime, exactly as the image installs it (Dockerfile):"
  echo "# pyproject.toml's [project] dependencies and everything they pull in, each"
  echo "# pinned. Nothing here is for tests or the local stack (requirements/test.txt)."
  echo "# Regenerate: hack/lock-requirements.sh"
  cat "$work/runtime"
} > requirements/runtime.txt

{
  echo "# Tests and the local stack: the runtime above, plus what only they need,"
  echo "# each pinned (\`make test\`, \`make up\` install this into .venv)."
  echo "# Regenerate: hack/lock-requirements.sh"
  echo "-r runtime.txt"
  # moto is pinned with its extra so that pip alone installs its server's needs.
  grep -vxFf "$work/runtime" "$work/all" | sed 's/^moto==/moto[server]==/'
} > requirements/test.txt
echo "lock-requirements: $(wc -l < "$work/runtime") runtime and $(grep -vxFf "$work/runtime" "$work/all" | wc -l) test pins written"
