"""An OpenAI-compatible completions server over the in-process sampler, so that a rollout reaches our own
model and a vLLM server (the GPU path) the same way (`gymflow.models.openai_client`).

    gymflow serve-model data/models/sft --port 8000
    curl localhost:8000/v1/completions -H 'content-type: application/json' \\
        -d '{"prompt": [[1, 2, 3]], "max_tokens": 8, "logprobs": 1, "return_tokens_as_token_ids": true}'

It speaks the part of vLLM's dialect that rollouts need: `prompt` as text or token ids, one or a batch;
`max_tokens`, `temperature` (0: greedy), `top_p`, `seed`, `n`, `stop` (strings, cut from the text as vLLM
does; the ids keep every sampled token), `stop_token_ids` (besides the tokenizer's eos), `logprobs` (the
policy's log-probability of each sampled token: log-softmax of the raw logits, as vLLM's default
`raw_logprobs`) and `return_tokens_as_token_ids` ("token_id:<id>" in `logprobs.tokens`).
Where it differs from vLLM: requests run one at a time (a lock; the prompts of one request are sampled as
one batch), `seed` seeds a request's batch as a whole (vLLM seeds each prompt with it), `top_logprobs` hold
only the sampled token, and streaming and `echo` are refused.
"""

from __future__ import annotations

import threading
import time
import uuid
from itertools import accumulate
from pathlib import Path

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve
from gymflow.models.sampling import Completion, sample

PROMPT_TYPES = "a string, a list of strings, a list of token ids or a list of token-id lists"


class CompletionRequest(BaseModel):
    """The body of POST /v1/completions; unknown fields are ignored, as vLLM and OpenAI do."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    max_tokens: int = Field(16, ge=1)  # vLLM's default
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    logprobs: int | None = Field(None, ge=0)
    return_tokens_as_token_ids: bool = False
    stream: bool = False
    echo: bool = False

    @model_validator(mode="before")
    @classmethod
    def null_is_default(cls, data: object) -> object:
        """A field sent as null takes its default, as in vLLM."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @property
    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class BadRequest(Exception):
    """A request this server cannot serve; answered with HTTP 400 and the message."""


def _error(status: int, message: str) -> JSONResponse:
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}, status_code=status
    )


def _validation_message(exc: RequestValidationError) -> str:
    """One line out of pydantic's list: a union's failures name every branch, so `prompt` gets its own."""
    errors = exc.errors()
    if errors[0]["type"] == "json_invalid":
        return "the body is not valid JSON"
    for err in errors:
        if tuple(err["loc"][:2]) == ("body", "prompt"):
            return f"prompt must be {PROMPT_TYPES}"
    err = errors[0]
    where = ".".join(str(part) for part in err["loc"] if part != "body") or "body"
    return f"{where}: {str(err['msg']).splitlines()[0]}"


def _prompt_ids(req: CompletionRequest, tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    prompt = req.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], str)):
        texts = [prompt] if isinstance(prompt, str) else prompt
        return [tokenizer(text)["input_ids"] for text in texts]
    return [prompt] if prompt and isinstance(prompt[0], int) else prompt


def _check(req: CompletionRequest, prompts: list[list[int]], vocab: int, context: int | None) -> None:
    if req.stream or req.echo:
        raise BadRequest("stream and echo are not supported by this server")
    if not prompts or any(not p for p in prompts):
        raise BadRequest("prompt is empty: every prompt needs at least one token")
    if any(not 0 <= i < vocab for p in prompts for i in p):
        raise BadRequest(f"prompt has a token id outside the vocabulary [0, {vocab})")
    if any(i < 0 for i in req.stop_token_ids or []):
        raise BadRequest("stop_token_ids must be non-negative")
    if "" in req.stop_strings:
        raise BadRequest("stop strings must not be empty")
    longest = max(len(p) for p in prompts)
    if context is not None and longest + req.max_tokens > context:
        raise BadRequest(
            f"this model's maximum context length is {context} tokens; the longest prompt ({longest}) "
            f"plus max_tokens ({req.max_tokens}) is more"
        )


def _text(
    completion: Completion,
    stop_ids: set[int],
    stop_strings: list[str],
    tokenizer: PreTrainedTokenizerBase,
) -> tuple[str, str | int | None]:
    """The choice's text and vLLM's `stop_reason`: the stop token (None for eos) or string is not in the
    text; the ids keep everything sampled."""
    ids = completion.token_ids
    if completion.finish_reason == "stop" and ids[-1] in stop_ids:
        reason = None if ids[-1] == tokenizer.eos_token_id else ids[-1]
        return tokenizer.decode(ids[:-1], skip_special_tokens=True), reason
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if completion.finish_reason == "stop":
        at, stop = min((text.find(s), s) for s in stop_strings if s in text)
        return text[:at], stop
    return text, None


def _logprobs(completion: Completion, as_ids: bool, tokenizer: PreTrainedTokenizerBase) -> dict[str, list]:
    pieces = [tokenizer.decode([i]) for i in completion.token_ids]
    tokens = [f"token_id:{i}" for i in completion.token_ids] if as_ids else pieces
    offsets = list(accumulate(map(len, pieces), initial=0))[: len(pieces)]
    return {
        "tokens": tokens,
        "token_logprobs": completion.logprobs,
        "top_logprobs": [{t: lp} for t, lp in zip(tokens, completion.logprobs, strict=True)],
        "text_offset": offsets,
    }


def create_app(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str) -> FastAPI:
    """The app serving `model` as `name`: GET /v1/models, POST /v1/completions."""
    app = FastAPI(title="gymflow model server")
    lock = threading.Lock()  # one generation at a time: a second would only split the same cores
    vocab = model.get_input_embeddings().num_embeddings
    context = getattr(model.config, "max_position_embeddings", None)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    created = int(time.time())

    @app.exception_handler(RequestValidationError)
    def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(exc))

    @app.exception_handler(BadRequest)
    def bad(request: Request, exc: BadRequest) -> JSONResponse:
        return _error(400, str(exc))

    @app.get("/v1/models")
    def models() -> dict:
        card = {"id": name, "object": "model", "created": created, "owned_by": "gymflow"}
        return {"object": "list", "data": [{**card, "max_model_len": context}]}

    @app.post("/v1/completions")
    def completions(req: CompletionRequest) -> JSONResponse:
        if req.model is not None and req.model != name:
            return _error(404, f"the model `{req.model}` does not exist; this server has `{name}`")
        prompts = _prompt_ids(req, tokenizer)
        _check(req, prompts, vocab, context)
        stop_strings = req.stop_strings
        stop_ids = {i for i in (tokenizer.eos_token_id, *(req.stop_token_ids or [])) if i is not None}
        rows = [p for p in prompts for _ in range(req.n)]  # choice index = prompt index * n + sample
        generator = None if req.seed is None else torch.Generator().manual_seed(req.seed)
        with lock:
            outs = sample(
                model,
                rows,
                req.max_tokens,
                sorted(stop_ids),
                pad_id,
                req.temperature,
                req.top_p,
                generator,
                stop_strings,
                tokenizer,
            )
        choices = []
        for index, out in enumerate(outs):
            text, reason = _text(out, stop_ids, stop_strings, tokenizer)
            choice = {"index": index, "text": text, "logprobs": None, "finish_reason": out.finish_reason}
            if req.logprobs is not None:
                choice["logprobs"] = _logprobs(out, req.return_tokens_as_token_ids, tokenizer)
            choices.append({**choice, "stop_reason": reason})
        prompt_tokens = sum(len(p) for p in prompts)
        completion_tokens = sum(len(o.token_ids) for o in outs)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        body = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": name,
            "choices": choices,
            "usage": usage,
        }
        return JSONResponse(body)

    return app


def load(model_dir: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model and tokenizer a stage saved in `model_dir` (or the named model it records)."""
    if not Path(model_dir).is_dir():
        raise UserError(
            f"no model directory {model_dir}: give a folder written by a stage, e.g. data/models/sft"
        )
    source = resolve(model_dir)
    try:
        tokenizer = load_tokenizer(model_dir)
        model = AutoModelForCausalLM.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load a model from {source}: {str(e).splitlines()[0]}") from None
    return model.eval(), tokenizer


def serve(model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Load the model in `model_dir` and serve it until interrupted; its name is `model_dir` as given."""
    import uvicorn

    model, tokenizer = load(model_dir)
    print(f"serving {model_dir} at http://{host}:{port}/v1", flush=True)
    uvicorn.run(create_app(model, tokenizer, str(model_dir)), host=host, port=port, access_log=False)
