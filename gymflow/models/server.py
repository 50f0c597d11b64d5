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
Where it differs from vLLM: requests run one at a time (one worker thread; the prompts of one request are
sampled as one batch), `seed` seeds a request's batch as a whole (vLLM seeds each prompt with it),
`top_logprobs` hold only the sampled token, and streaming and `echo` are refused.

What one request may cost is bounded (`Limits`, printed at start-up): the body, `n`, the sequences of a
batch, `max_tokens`, the context, and the cache the sampler holds (sequences x (longest prompt +
max_tokens)); and so is the number of requests held at once. Every refusal and client mistake is a 4xx in
OpenAI's error shape, decided before the model runs. A request whose client has gone stops at the sampler's
next forward pass, or never starts.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from itertools import accumulate
from pathlib import Path
from typing import Annotated

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from gymflow.errors import UserError
from gymflow.models.build import load_tokenizer, resolve
from gymflow.models.decode_attention import use_for_decoding
from gymflow.models.sampling import Completion, sample
from gymflow.serving import BadRequest, listen, read_json

UNIONS = {
    "prompt": "a string, a list of strings, a list of token ids or a list of token-id lists",
    "stop": "a string or a list of at most 16 strings",
}
INT64 = 2**63  # seeds as vLLM takes them (torch.long)
MIN_TEMPERATURE = 0.01  # vLLM's floor: below it the scaled logits overflow to inf and the draw is NaN
ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    413: "RequestTooLargeError",
    429: "RateLimitError",
    503: "ServiceUnavailableError",
}


@dataclass(frozen=True)
class Limits:
    """What one request may cost and how many are held at once, so that the server's memory is bounded.

    Peak RSS measured with the CPU default model (vocabulary 2048, width 128, 2 layers, context 4096): 0.45 GB
    idle, 1.8 GB for n 64 over a 2,000-token prompt (129k tokens of cache), 3.2 GB at the default
    `max_batch_tokens`; `n` 512 over 2,000 tokens, refused now, took it to 11.3 GB.
    """

    max_n: int = 64  # completions per prompt (`n`); rollouts send 1
    max_batch: int = 256  # sequences per request: prompts x n (each costs at least 256 cached positions)
    max_tokens: int | None = None  # per completion; None: the model's context
    max_batch_tokens: int = 262_144  # sequences x (longest prompt + max_tokens): 64 rollouts of 4096 tokens
    max_in_flight: int = 8  # requests running or waiting; more are answered 429
    max_body_mb: int = 4  # request body (a batch of 64 prompts of 4096 token ids is ~1.5 MB)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise UserError(f"--{f.name.replace('_', '-')} must be at least 1 (got {value})")


def _unicode(text: str) -> str:
    """JSON may carry a lone surrogate ("\\ud800"), which no tokenizer or UTF-8 response can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone surrogate (e.g. \\ud800), which is not valid Unicode") from None
    return text


Text = Annotated[StrictStr, AfterValidator(_unicode)]
Float = Annotated[float, Field(strict=True)]  # a JSON number; not `true` or "1"


class CompletionRequest(BaseModel):
    """The body of POST /v1/completions; unknown fields are ignored, as vLLM and OpenAI do. The bounds here
    hold for every server; `Limits` and the model's vocabulary and context are checked in `_check`."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: Text | None = None
    prompt: Text | list[Text] | list[StrictInt] | list[list[StrictInt]]
    max_tokens: StrictInt = Field(16, ge=1)  # vLLM's default
    temperature: Float = Field(1.0, ge=0)  # 0: greedy; otherwise at least MIN_TEMPERATURE
    top_p: Float = Field(1.0, gt=0, le=1)
    n: StrictInt = Field(1, ge=1)
    seed: StrictInt | None = Field(None, ge=-INT64, lt=INT64)
    stop: Text | Annotated[list[Text], Field(max_length=16)] | None = None
    stop_token_ids: list[StrictInt] | None = None
    logprobs: StrictInt | None = Field(None, ge=0, le=20)  # vLLM's default max_logprobs
    return_tokens_as_token_ids: StrictBool = False
    stream: StrictBool = False
    echo: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def null_is_default(cls, data: object) -> object:
        """A field sent as null takes its default, as in vLLM."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @property
    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class Cancelled(Exception):
    """The client went away before its generation finished."""


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    """OpenAI's error shape, with vLLM's type names; the message is made safe to send (no surrogates)."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    kind = ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    headers = {"retry-after": "1"} if status == 429 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _invalid(exc: ValidationError) -> BadRequest:
    """One line out of pydantic's list. A union's failures name every branch, so a union field gets its own
    line, unless one of our validators (the more specific) said what is wrong."""
    errors = exc.errors(include_url=False)
    ours = [e for e in errors if e["type"] == "value_error"]
    err = (ours or errors)[0]
    if not err["loc"]:
        return BadRequest("the body must be a JSON object (a completion request)")
    param = str(err["loc"][0])
    if param in UNIONS and not ours:
        return BadRequest(f"{param} must be {UNIONS[param]}", param)
    where = ".".join([param, *(str(i) for i in err["loc"][1:] if isinstance(i, int))])  # no branch names
    return BadRequest(f"{where}: {str(err['msg']).removeprefix('Value error, ').splitlines()[0]}", param)


async def _parse(request: Request, max_bytes: int) -> CompletionRequest:
    """The body as a validated request (413 beyond `max_bytes`, 400 otherwise)."""
    try:
        data = await read_json(request, max_bytes)
    except ClientDisconnect:
        raise Cancelled from None
    try:
        return CompletionRequest.model_validate(data)
    except ValidationError as e:
        raise _invalid(e) from None


def _prompt_ids(req: CompletionRequest, tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    prompt = req.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], str)):
        texts = [prompt] if isinstance(prompt, str) else prompt
        return [tokenizer(text)["input_ids"] for text in texts]
    return [prompt] if prompt and isinstance(prompt[0], int) else prompt


def _check_shape(req: CompletionRequest, limits: Limits, context: int) -> None:
    """What can be refused before tokenizing: the batch's size and `max_tokens`."""
    if req.stream or req.echo:
        raise BadRequest(
            "stream and echo are not supported by this server", "stream" if req.stream else "echo"
        )
    if 0 < req.temperature < MIN_TEMPERATURE:
        raise BadRequest(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}", "temperature")
    if "" in req.stop_strings:
        raise BadRequest("stop strings must not be empty", "stop")
    if req.n > limits.max_n:
        raise BadRequest(f"n must be at most {limits.max_n} on this server (--max-n)", "n")
    single = isinstance(req.prompt, str) or (req.prompt and isinstance(req.prompt[0], int))
    rows = (1 if single else len(req.prompt)) * req.n
    if rows > limits.max_batch:
        raise BadRequest(
            f"prompts x n is {rows} sequences; this server samples at most {limits.max_batch} per request "
            "(--max-batch): send fewer prompts or a smaller n",
            "prompt",
        )
    most = min(limits.max_tokens or context, context)
    if req.max_tokens > most:
        raise BadRequest(f"max_tokens must be at most {most} on this server", "max_tokens")


def _check(
    req: CompletionRequest, prompts: list[list[int]], vocab: int, context: int, limits: Limits
) -> None:
    """What needs the token ids: their range, the context and the batch's cache (`Limits.max_batch_tokens`)."""
    if not prompts or any(not p for p in prompts):
        raise BadRequest("prompt is empty: every prompt needs at least one token", "prompt")
    if any(not 0 <= i < vocab for p in prompts for i in p):
        raise BadRequest(f"prompt has a token id outside the vocabulary [0, {vocab})", "prompt")
    if any(not 0 <= i < vocab for i in req.stop_token_ids or []):
        raise BadRequest(f"stop_token_ids must be token ids in [0, {vocab})", "stop_token_ids")
    longest = max(len(p) for p in prompts)
    if longest + req.max_tokens > context:
        raise BadRequest(
            f"this model's maximum context length is {context} tokens; the longest prompt ({longest}) "
            f"plus max_tokens ({req.max_tokens}) is more",
            "prompt",
        )
    cost = len(prompts) * req.n * (longest + req.max_tokens)  # rows are left-padded to the longest
    if cost > limits.max_batch_tokens:
        raise BadRequest(
            f"this request needs a cache of {cost} tokens (prompts x n x (longest prompt + max_tokens)); "
            f"this server allows {limits.max_batch_tokens} (--max-batch-tokens): split it or ask for less",
            "n" if req.n > 1 else "prompt",
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


class Guarded:
    """The model as the sampler calls it, with two server concerns: a generation stops at its next forward
    pass once one of `stops` is set (its client disconnected, the server is stopping); and where the model
    allows, only the last position's logits are computed (the sampler reads no others; a batch of prompts
    would otherwise hold batch x length x vocabulary floats: 80 GB for 64 x 2048 tokens of a 151k-token
    vocabulary)."""

    def __init__(self, model: PreTrainedModel, *stops: threading.Event) -> None:
        use_for_decoding(model)  # the sampler sees this wrapper, not the model
        self.model, self.stops, self.device = model, stops, model.device
        self.last_only = "logits_to_keep" in inspect.signature(model.forward).parameters

    def __call__(self, **inputs):
        if any(stop.is_set() for stop in self.stops):
            raise Cancelled
        if self.last_only:
            inputs.setdefault("logits_to_keep", 1)
        return self.model(**inputs)


async def _watch(request: Request, gone: threading.Event) -> None:
    """Set `gone` when the client disconnects (the body is read, so the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()


async def _unless_gone(request: Request, worker: ThreadPoolExecutor, generate, *args) -> list[Completion]:
    """`generate(gone, *args)` on the worker. If the client disconnects first, a job still waiting is dropped
    and a running one stops at its next forward pass (`Guarded`); either way the handler ends with
    `Cancelled`, and only once the model is free again, so the requests counted in flight are the real ones."""
    gone = threading.Event()
    job = worker.submit(generate, gone, *args)
    done = asyncio.wrap_future(job)
    watch = asyncio.create_task(_watch(request, gone))
    try:
        await asyncio.wait({done, watch}, return_when=asyncio.FIRST_COMPLETED)
        if gone.is_set() and job.cancel():
            raise Cancelled
        return await done
    finally:
        gone.set()  # also when the handler is cancelled (server shutdown); harmless once done
        watch.cancel()


def create_app(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str, limits: Limits | None = None
) -> FastAPI:
    """The app serving `model` as `name`: GET /v1/models, POST /v1/completions."""
    limits = limits or Limits()
    # One generation at a time, so its queue is the waiting requests: a second would only split the cores.
    worker = ThreadPoolExecutor(1, "generate")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        worker.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="gymflow model server", lifespan=lifespan)
    held = {"requests": 0}  # running or waiting, counted on the event loop's thread
    stopping = threading.Event()  # set on Ctrl-C (`serve`): generations stop at their next forward pass
    vocab = model.get_input_embeddings().num_embeddings
    context = getattr(model.config, "max_position_embeddings", None) or limits.max_tokens or 4096
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    created = int(time.time())
    app.state.limits, app.state.held, app.state.context = limits, held, context
    app.state.stopping = stopping

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> JSONResponse:  # unknown path, wrong method
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    def server_fault(request: Request, exc: Exception) -> JSONResponse:  # a bug, never a client's mistake
        return _error(500, f"internal server error ({type(exc).__name__}); the server log has the traceback")

    @app.get("/v1/models")
    def models() -> dict:
        card = {"id": name, "object": "model", "created": created, "owned_by": "gymflow"}
        return {"object": "list", "data": [{**card, "max_model_len": context}]}

    def generate(gone: threading.Event, *args) -> list[Completion]:
        if gone.is_set() or stopping.is_set():
            raise Cancelled
        return sample(Guarded(model, gone, stopping), *args)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        if held["requests"] >= limits.max_in_flight:
            return _error(429, f"{limits.max_in_flight} requests are running or waiting (--max-in-flight)")
        held["requests"] += 1
        try:
            req = await _parse(request, limits.max_body_mb * 2**20)
            if req.model is not None and req.model != name:
                message = f"the model `{req.model[:200]}` does not exist; this server has `{name}`"
                return _error(404, message, "model")
            _check_shape(req, limits, context)
            prompts = _prompt_ids(req, tokenizer)
            _check(req, prompts, vocab, context, limits)
            stop_strings = req.stop_strings
            stop_ids = {i for i in (tokenizer.eos_token_id, *(req.stop_token_ids or [])) if i is not None}
            rows = [p for p in prompts for _ in range(req.n)]  # choice index = prompt index * n + sample
            generator = None if req.seed is None else torch.Generator().manual_seed(req.seed)
            args = (rows, req.max_tokens, sorted(stop_ids), pad_id, req.temperature, req.top_p, generator)
            outs = await _unless_gone(request, worker, generate, *args, stop_strings, tokenizer)
        except BadRequest as e:
            return _error(e.status, str(e), e.param)
        except Cancelled:
            if stopping.is_set():
                return _error(503, "the server is shutting down")
            return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
        finally:
            held["requests"] -= 1
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


def describe(limits: Limits, context: int) -> str:
    """The limits as printed at start-up."""
    most = min(limits.max_tokens or context, context)
    return (
        f"limits: n <= {limits.max_n}, prompts x n <= {limits.max_batch}, max_tokens <= {most}, "
        f"prompt + max_tokens <= {context} (the model's context), prompts x n x (longest prompt + max_tokens) "
        f"<= {limits.max_batch_tokens} tokens, {limits.max_in_flight} requests in flight, "
        f"bodies <= {limits.max_body_mb} MB"
    )


class Server(uvicorn.Server):
    """uvicorn's server, which on Ctrl-C or SIGTERM first stops the app's generations (answered 503), so
    that it need not wait for a long one to finish."""

    def handle_exit(self, sig: int, frame) -> None:
        self.config.app.state.stopping.set()
        super().handle_exit(sig, frame)


def serve(
    model_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None
) -> None:
    """Load the model in `model_dir` and serve it until interrupted; its name is `model_dir` as given."""
    limits = limits or Limits()
    sock = listen(host, port)  # before the model loads: a busy port is reported at once
    model, tokenizer = load(model_dir)
    app = create_app(model, tokenizer, str(model_dir), limits)
    print(f"serving {model_dir} at http://{host}:{port}/v1", flush=True)
    print(describe(limits, app.state.context), flush=True)
    config = uvicorn.Config(app, access_log=False, timeout_graceful_shutdown=5)
    Server(config).run(sockets=[sock])
