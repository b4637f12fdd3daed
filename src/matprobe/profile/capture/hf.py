"""One decode step of a Hugging Face ``transformers`` model, with random weights.

The model is built from its config alone — a name ``shapes --model`` knows,
whose numbers are mapped to the transformers config fields, or a
``config.json`` — so nothing is downloaded. The KV cache is prefilled with
``cached`` tokens, then one new token (m = 1) runs under
:func:`~matprobe.profile.capture.aten.recording`.

transformers is an optional extra, imported by name at run time: a missing
install is a one-line error, and mypy does not walk its sources.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from matprobe.errors import MatprobeError
from matprobe.profile.capture.aten import TORCH_DTYPES, recording
from matprobe.profile.capture.record import Capture
from matprobe.profile.models import MODELS, ModelConfig, get_model
from matprobe.safetext import term_safe

#: ``model_type`` values this command builds. Qwen2 always has a bias on Q, K
#: and V; Llama has one (on Q, K, V and O) only with ``attention_bias``.
ARCHITECTURES: tuple[str, ...] = ("qwen2", "llama")

#: dtypes a model can run in (no quantized weights in a transformers model).
CAPTURE_DTYPES: tuple[str, ...] = ("f16", "bf16", "f32")
DEVICES: tuple[str, ...] = ("cpu", "cuda")

_TORCH_DTYPE = {name: dtype for dtype, name in TORCH_DTYPES.items()}


@dataclass(frozen=True)
class ModelSource:
    """A model to build: the numbers decode_specs uses and the transformers config.

    ``known_name`` is true for a name ``matprobe shapes --model`` knows;
    ``warnings`` are what transformers said while reading the config.
    """

    config: ModelConfig
    architecture: str
    hf_config: Any
    known_name: bool
    warnings: tuple[str, ...] = ()


def _shown(value: object) -> str:
    """A value from the user's config as an error message may quote it: one line,
    no control characters, not too long."""
    text = term_safe(" ".join(str(value).split()))
    return text if len(text) <= 200 else text[:199] + "…"


def _architecture_of(name: str) -> str:
    for architecture in ARCHITECTURES:
        if name.startswith(architecture):
            return architecture
    raise MatprobeError(f"model {name}: no transformers architecture known for it")


def _fields_of(config: ModelConfig, architecture: str) -> dict[str, Any]:
    """The transformers config fields that give ``config``'s shapes."""
    fields: dict[str, Any] = {
        "hidden_size": config.hidden,
        "intermediate_size": config.intermediate,
        "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim,
        "vocab_size": config.vocab,
        "num_hidden_layers": config.layers,
        "tie_word_embeddings": config.tie_embeddings,
    }
    if architecture == "llama":
        if config.qkv_bias:  # Llama's attention_bias would put one on o_proj too
            raise MatprobeError(f"model {config.name}: a Llama with a QKV bias is not built here")
        fields.update(attention_bias=False, mlp_bias=False)
    elif not config.qkv_bias:
        raise MatprobeError(f"model {config.name}: a Qwen2 always has a QKV bias")
    return fields


#: config.json numbers that fix the shapes: positive integers where given.
_POSITIVE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "num_hidden_layers",
)


def _read_config_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MatprobeError(f"{_shown(path)} is not a config.json: not UTF-8 text") from None
    except OSError as exc:
        raise MatprobeError(f"cannot read {_shown(path)}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MatprobeError(
            f"{_shown(path)} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise MatprobeError(f"{_shown(path)} is not a config.json: not a JSON object")
    return data


def _fields_from_json(path: Path, layers: int | None) -> tuple[str, str, dict[str, Any]]:
    """The architecture, the (escaped) name and the config fields of a config.json."""
    data = _read_config_json(path)
    architecture = data.get("model_type")
    if architecture not in ARCHITECTURES:
        raise MatprobeError(
            f"{_shown(path)}: unsupported architecture (model_type "
            f"'{_shown(architecture)}'); supported: {', '.join(ARCHITECTURES)}"
        )
    fields = {key: value for key, value in data.items() if key != "model_type"}
    # Checked before transformers sees them: it divides by some (heads) and its
    # errors would say so, not which number is wrong.
    for key in _POSITIVE_FIELDS:
        value = fields.get(key)
        if value is not None and (type(value) is not int or value < 1):
            raise MatprobeError(
                f"{_shown(path)}: {key} must be a positive integer, got {_shown(repr(value))}"
            )
    if layers is not None:
        fields["num_hidden_layers"] = layers
        if isinstance(fields.get("layer_types"), list):  # one entry per layer
            fields["layer_types"] = fields["layer_types"][:layers]
    raw_name = data.get("_name_or_path")
    # The name is shown on the terminal and in errors: escaped once, here.
    name = _shown(raw_name if isinstance(raw_name, str) and raw_name.strip() else path.stem)
    return architecture, name, fields


def _numbers_of(hf_config: Any, name: str, architecture: str, source: str) -> ModelConfig:
    """decode_specs' numbers from a transformers config, its defaults filled in."""
    heads = hf_config.num_attention_heads
    head_dim: Any = getattr(hf_config, "head_dim", None)
    if head_dim is None and isinstance(heads, int) and heads > 0:
        head_dim = hf_config.hidden_size // heads
    qkv_bias = True if architecture == "qwen2" else bool(hf_config.attention_bias)
    return ModelConfig(
        name=name,
        hidden=hf_config.hidden_size,
        intermediate=hf_config.intermediate_size,
        heads=heads,
        kv_heads=hf_config.num_key_value_heads or heads,
        head_dim=head_dim,
        vocab=hf_config.vocab_size,
        layers=hf_config.num_hidden_layers,
        qkv_bias=qkv_bias,
        tie_embeddings=bool(hf_config.tie_word_embeddings),
        source=source,
    )


def resolve_model(model: str, *, layers: int | None = None, context: int = 1) -> ModelSource:
    """A known model name (any case) or the path of a ``config.json``, with the
    layer count replaced by ``layers`` when given, ready for ``context`` cached
    tokens and one more."""
    if layers is not None and (
        isinstance(layers, bool) or not isinstance(layers, int) or layers < 1
    ):
        raise MatprobeError(f"layers must be an integer >= 1, got {layers!r}")
    path = Path(model)
    # A name shapes --model knows wins over a file of that name; anything else that
    # is not a file nor ends in .json is a name, which get_model refuses if unknown.
    if model.strip().lower() not in MODELS and (path.suffix == ".json" or path.exists()):
        architecture, name, fields = _fields_from_json(path, layers)
        hf_config, messages = _ready_config(architecture, fields, _shown(path), context)
        config = _numbers_of(hf_config, name, architecture, source=_shown(path))
        return ModelSource(config, architecture, hf_config, False, messages)
    config = get_model(model)
    if layers is not None:
        config = replace(config, layers=layers)
    architecture = _architecture_of(config.name)
    fields = _fields_of(config, architecture)
    hf_config, messages = _ready_config(architecture, fields, config.name, context)
    return ModelSource(config, architecture, hf_config, True, messages)


def _ready_config(
    architecture: str, fields: dict[str, Any], where: str, context: int
) -> tuple[Any, tuple[str, ...]]:
    """The transformers config, and what transformers said while reading it."""
    # Rotary tables must reach the new token's position (a value that is not a
    # number is left for transformers to refuse).
    longest = fields.get("max_position_embeddings")
    if longest is None or (type(longest) is int and longest <= context):
        fields = {**fields, "max_position_embeddings": context + 1}
    messages: list[str] = []
    hf_config = _hf_config(_transformers(), architecture, fields, where=where, collected=messages)
    return hf_config, tuple(messages)


def _transformers() -> ModuleType:
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise MatprobeError("capture needs transformers: pip install 'matprobe[capture]'") from None


@contextlib.contextmanager
def _quiet(transformers: ModuleType, collected: list[str]) -> Iterator[None]:
    """transformers' logging off and its warnings collected: their text can quote
    the user's config, so it reaches the terminal only through the caller, escaped."""
    logging = transformers.utils.logging
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.CRITICAL)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        collected.extend(dict.fromkeys(_shown(w.message) for w in caught))
    finally:
        logging.set_verbosity(verbosity)


def _hf_config(
    transformers: ModuleType,
    architecture: str,
    fields: dict[str, Any],
    *,
    where: str,
    collected: list[str],
) -> Any:
    # transformers validates a config in its own way (its errors derive from
    # Exception and quote the values): any failure here is the config's.
    try:
        with _quiet(transformers, collected):
            return transformers.AutoConfig.for_model(architecture, **fields)
    except Exception as exc:
        raise MatprobeError(
            f"{where}: transformers cannot read it as a {architecture} config: {_shown(exc)}"
        ) from None


def capture_decode(
    model: str,
    *,
    context: int,
    dtype: str = "f16",
    layers: int | None = None,
    device: str = "cpu",
) -> Capture:
    """Run one decode step after ``context`` cached tokens and record its matmuls."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise MatprobeError(f"context must be an integer >= 1, got {context!r}")
    if dtype not in CAPTURE_DTYPES:
        raise MatprobeError(
            f"capture dtype must be one of {', '.join(CAPTURE_DTYPES)}, got {dtype!r}"
        )
    if device not in DEVICES:
        raise MatprobeError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise MatprobeError("--device cuda: no CUDA device is visible here")
    source = resolve_model(model, layers=layers, context=context)
    transformers = _transformers()
    messages = list(source.warnings)
    with _quiet(transformers, messages), torch.no_grad():
        # Building the model and the prefill run transformers' code alone, on the
        # user's config: a failure there is the config's (see _hf_config).
        try:
            net = transformers.AutoModelForCausalLM.from_config(
                source.hf_config, attn_implementation="sdpa"
            )
            net = net.to(device=device, dtype=_TORCH_DTYPE[dtype]).eval()
            # transformers 5 renamed past_key_values to cache, in the output too.
            parameters = inspect.signature(net.forward).parameters
            cache_name = "cache" if "cache" in parameters else "past_key_values"
            # Token ids change no shape: zeros. The prefill runs the base model, so
            # no logits are computed for the whole prompt and thrown away.
            prompt = torch.zeros((1, context), dtype=torch.long, device=device)
            cache = getattr(net.base_model(input_ids=prompt, use_cache=True), cache_name)
        except Exception as exc:
            raise MatprobeError(
                f"{source.config.name}: transformers cannot build or prefill the model: "
                f"{_shown(exc)}"
            ) from None
        new_token = torch.zeros((1, 1), dtype=torch.long, device=device)
        with recording(net) as log:
            net(input_ids=new_token, use_cache=True, **{cache_name: cache})
    return Capture(
        model=source.config,
        known_name=source.known_name,
        architecture=source.architecture,
        cached=context,
        dtype=dtype,
        device=device,
        calls=tuple(log.calls),
        unhandled=tuple(log.unhandled.items()),
        warnings=tuple(messages),
        versions=(("transformers", str(transformers.__version__)), ("torch", torch.__version__)),
    )
