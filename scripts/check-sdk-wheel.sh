#!/usr/bin/env bash
# The SDK wheel on its own: build agentrt's wheel, install only it into a fresh virtual
# environment (its dependencies come from the configured package index), and check that
#   - `import agentrt, agentrt.journal, agentrt.otlp_json` works and no other agentrt member
#     is importable;
#   - none of the server / demo dependencies came along (starlette, uvicorn, matplotlib, rich,
#     opentelemetry-sdk);
#   - `agentrt controller serve` exits 2 with one line naming agentrt-controller;
#   - `agentrt journal --help` works.
# Prints a short summary; exits non-zero when a check fails. Used by .ci/run and, with
# AGENTRT_CHECK_WHEELS=1, by tests/test_layout.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${AGENTRT_PYTHON:-$ROOT/.venv/bin/python}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "check-sdk-wheel: FAIL: $*" >&2
  failures=$((failures + 1))
}
# pip warns about this machine's optional local package mirrors; keep real errors visible.
quiet_pip() { "$@" 2> >(grep -v 'is ignored' >&2); }

quiet_pip "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation --no-index \
  --wheel-dir "$work/dist" "$ROOT/agentrt"
wheel="$(ls "$work"/dist/agentrt-*.whl)"
"$PYTHON" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
start=$SECONDS
if ! quiet_pip "$venv_python" -m pip install --quiet "$wheel"; then
  echo "check-sdk-wheel: FAIL: installing $(basename "$wheel") into a fresh venv failed" >&2
  exit 1
fi
install_s=$((SECONDS - start))
cd "$work" # nothing from the checkout on sys.path

if ! "$venv_python" -c 'import agentrt, agentrt.journal, agentrt.otlp_json' 2>"$work/import.err"; then
  fail "import agentrt, agentrt.journal, agentrt.otlp_json: $(tail -n 1 "$work/import.err")"
fi
for package in agentrt_serving agentrt_controller agentrt_emulator agentrt_sim agentrt_adapters \
  agentrt_demo; do
  if "$venv_python" -c "import $package" 2>/dev/null; then
    fail "$package is importable with only the SDK installed"
  fi
done

installed="$("$venv_python" -m pip list --format=freeze 2>/dev/null | cut -d= -f1 |
  tr '[:upper:]_' '[:lower:]-')"
for unwanted in starlette uvicorn matplotlib rich opentelemetry-sdk; do
  if grep -qx "$unwanted" <<<"$installed"; then
    fail "$unwanted was installed with the SDK"
  fi
done

status=0
"$work/venv/bin/agentrt" controller serve >"$work/out" 2>"$work/err" || status=$?
if [[ $status -ne 2 ]]; then
  fail "agentrt controller serve exited $status, not 2"
fi
if [[ "$(wc -l <"$work/err")" -ne 1 ]] || ! grep -q 'agentrt-controller' "$work/err"; then
  fail "agentrt controller serve did not say in one line to install agentrt-controller: $(cat "$work/err")"
fi

if ! "$work/venv/bin/agentrt" journal --help >"$work/out" 2>&1; then
  fail "agentrt journal --help failed: $(tail -n 3 "$work/out")"
fi

count="$(wc -l <<<"$installed")"
size_kib=$(($(stat -c %s "$wheel") / 1024))
echo "check-sdk-wheel: $(basename "$wheel") (${size_kib} KiB) alone in a fresh venv:" \
  "${count} distributions installed in ${install_s} s; no server or demo dependencies;" \
  "agentrt controller serve -> exit ${status}: $(head -n 1 "$work/err")"
if [[ $failures -ne 0 ]]; then
  echo "check-sdk-wheel: ${failures} check(s) failed" >&2
  exit 1
fi
echo "check-sdk-wheel: all checks passed"
