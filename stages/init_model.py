"""Stage `init_model`: the initial policy, before any training.

    dvc repro init_model          # or: python -m stages.init_model
With `model.name_or_path` null (the CPU default): trains a byte-level BPE tokenizer on the instructions and
AgentTraj text (with the normalizer and split transformers loads a qwen2 directory with, so every stage
encodes as its tokenizer.json does) and builds a small Qwen2-style decoder from `params.yaml`, saved as a
Hugging Face model directory in data/models/init. With a name, data/models/init only records it; the model is used unchanged
(SmolLM2-135M-Instruct: `python -m gymflow.models.pretrained data/models/smollm2` builds that directory first).
"""

from gymflow import paths
from gymflow.config import check_model_source, load_params
from gymflow.models.build import build_initial, write_source
from gymflow.stage import run_stage, write_metrics
from gymflow.store.db import connect
from gymflow.store.io import atomic_dir

OUT = paths.model("init")


def corpus() -> list[str]:
    """Every instruction and every AgentTraj message: what the policy will read and write. Only this stage's
    declared inputs are read, never later stages' rollouts."""
    tasks = connect(paths.INSTRUCTIONS).execute("select instruction from tasks").fetchall()
    turns = connect(paths.TRAJECTORY_ROLLOUTS).execute("select text from turns").fetchall()
    return [text for (text,) in tasks + turns if text]


def main() -> None:
    cfg = load_params().model
    with atomic_dir(OUT) as tmp:
        if cfg.name_or_path:
            check_model_source(cfg.name_or_path)  # the params stage checked it; a direct run checks here
            write_source(tmp, cfg.name_or_path)
            metrics = {"source": cfg.name_or_path}
        else:
            texts = corpus()
            model = build_initial(texts, cfg, tmp)
            metrics = {
                "source": "built",
                "vocab": model.config.vocab_size,
                "parameters": sum(p.numel() for p in model.parameters()),
                "corpus_texts": len(texts),
            }
    write_metrics("init_model", metrics)
    print(", ".join(f"{k} {v}" for k, v in metrics.items()))


if __name__ == "__main__":
    run_stage(main, resume_note="nothing is kept; run the stage again to build the model")
