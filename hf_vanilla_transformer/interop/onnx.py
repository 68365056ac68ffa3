"""Export to ONNX in the folder layout that optimum and transformers.js read.

    output_dir/
        config.json, generation_config.json, tokenizer.json, tokenizer_config.json, the PyTorch weights
        onnx/encoder_model.onnx           input_ids, attention_mask -> last_hidden_state
        onnx/decoder_model_merged.onnx    one decoder step, with or without a key/value cache (below)
        onnx/*_quantized.onnx             with `quantize=True`: dynamic int8 (transformers.js `dtype: "q8"`)

The merged decoder is what optimum's `merge_decoders` builds: two graphs, the first step (no cache; it also computes
the cross-attention keys and values from the encoder output) and a later step (reads them back from the cache), as
the branches of one `If` node chosen by the boolean input `use_cache_branch`, sharing one copy of the weights. Inputs
`input_ids`, `encoder_attention_mask`, `encoder_hidden_states`, `past_key_values.N.{decoder,encoder}.{key,value}`
(batch, heads, length, head dim), `use_cache_branch`; outputs `logits` and `present.N.{decoder,encoder}.{key,value}`.
On a cached step the cross-attention entries of `present` are empty placeholders (optimum's convention): keep those
of the first step.

The graphs are traced from our own model by `torch.onnx.export(dynamo=True)`, so they compute exactly its function,
pre-norm included. transformers' own exporters (`transformers.exporters`) trace whole prefill and decode calls of
`generate()` and name the graph inputs after the cache objects' attributes, which is neither this layout nor these
names; a small wrapper module per graph gives both directly.

`model_type` chooses the `config.json` beside the graphs. "marian" (default) writes the MarianMTModel form of the model
(`interop.marian.export_marian`: the same function, another layout), which transformers.js, optimum and every Marian
consumer understand; pre-norm models have no Marian form and are refused. "vanilla_transformer" writes this package's
own folder: any model, for ONNX Runtime (`onnx_runtime.OnnxSeq2SeqLM`) and this package, not for transformers.js.
"""

import contextlib
import hashlib
import logging as logging_module
import warnings
from pathlib import Path

import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.utils import logging

from ..data.folders import check_output_dir, load_tokenizer, load_translation_model, resolve_model, writes_folder
from ..errors import InputError
from ..model.input_checks import CACHE_NAME
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .marian import export_marian


logger = logging.get_logger(__name__)

ONNX_OPSET = 18
ENCODER_FILE, DECODER_FILE = "encoder_model.onnx", "decoder_model_merged.onnx"
QUANTIZED_SUFFIX = "_quantized"  # transformers.js: dtype "q8" loads `<name>_quantized.onnx`
MODEL_TYPES = ("marian", "vanilla_transformer")
# Symbolic dimension names. transformers.js builds the empty cache of the first step from the decoder's input
# metadata: "batch_size" becomes the batch size and every other symbolic dimension 0.
BATCH, SOURCE, TARGET = "batch_size", "encoder_sequence_length", "decoder_sequence_length"
PAST, PRESENT = "past_sequence_length", "present_sequence_length"


class _EncoderGraph(nn.Module):
    def __init__(self, model: VanillaTransformerForConditionalGeneration):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids, attention_mask):
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (b, s, d)


class _DecoderStepGraph(nn.Module):
    """One decoder call: logits and the updated cache. Without past keys and values (the first step) the
    cross-attention keys and values are computed from `encoder_hidden_states` and returned; with them, they are read
    from the cache."""

    def __init__(self, model: VanillaTransformerForConditionalGeneration):
        super().__init__()
        self.model = model

    def forward(self, input_ids, encoder_attention_mask, encoder_hidden_states, *past_key_values):
        # Per layer: self-attention key, value, cross-attention key, value, each (b, h, length, dh).
        cache = EncoderDecoderCache([past_key_values[i : i + 4] for i in range(0, len(past_key_values), 4)])
        logits = self.model(
            encoder_outputs=(encoder_hidden_states,),
            attention_mask=encoder_attention_mask,
            decoder_input_ids=input_ids,
            use_cache=True,
            **{CACHE_NAME: cache},  # the name this transformers gives it
        ).logits  # (b, t, v)
        present = []
        for self_layer, cross_layer in zip(cache.self_attention_cache.layers, cache.cross_attention_cache.layers):
            present += [self_layer.keys, self_layer.values]
            if not past_key_values:
                present += [cross_layer.keys, cross_layer.values]
        return logits, *present


def cache_names(prefix: str, num_layers: int, encoder: bool = True) -> list[str]:
    """`prefix.N.decoder.key`, `prefix.N.decoder.value`, then (with `encoder`) the same for `encoder`, per layer."""
    parts = ("decoder", "encoder") if encoder else ("decoder",)
    return [f"{prefix}.{i}.{part}.{kind}" for i in range(num_layers) for part in parts for kind in ("key", "value")]


@contextlib.contextmanager
def _quiet(*loggers: str):
    """Hide the warnings of torch's exporter and ONNX Runtime's quantizer: notes about torch itself (torchvision ops
    it skips, deprecations inside torch.export, axis names shared by several inputs) and a generic quantization
    tip, nothing a user of this export can act on."""
    levels = {name: logging_module.getLogger(name).level for name in loggers}
    for name in loggers:
        logging_module.getLogger(name).setLevel(logging_module.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="# The axis name")
            warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
            yield
    finally:
        for name, level in levels.items():
            logging_module.getLogger(name).setLevel(level)


def _trace(module: nn.Module, args: tuple, input_names, output_names, dynamic_shapes) -> onnx.ModelProto:
    with _quiet("torch.onnx._internal.exporter._registration"):
        program = torch.onnx.export(
            module.eval(),
            args,
            dynamo=True,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            opset_version=ONNX_OPSET,
            verbose=False,
        )
    return program.model_proto


def _export_graphs(model: VanillaTransformerForConditionalGeneration) -> tuple[onnx.ModelProto, ...]:
    """Encoder, first decoder step and cached decoder step, traced on example inputs with every length dynamic."""
    config = model.config
    layers, heads = config.decoder_layers, config.decoder_attention_heads
    # Example sizes of at least 2 and all different: torch.export specialises dimensions of size 0 or 1, and would
    # tie dimensions that happen to be equal.
    batch, source, target, past = 2, 5, 3, 4
    # Lengths up to the model's positions, which its forward checks (torch.export turns the check into a guard).
    source_dim, target_dim, past_dim = (
        torch.export.Dim(name, max=config.max_position_embeddings) for name in (SOURCE, TARGET, PAST)
    )
    batch_dim = torch.export.Dim(BATCH)
    input_ids = torch.ones(batch, source, dtype=torch.long)  # the values do not matter to the trace
    attention_mask = torch.ones(batch, source, dtype=torch.long)
    encoder_hidden_states = torch.zeros(batch, source, config.d_model)
    decoder_input_ids = torch.ones(batch, target, dtype=torch.long)
    head_dim = config.d_model // heads
    past_key_values = [
        torch.zeros(batch, heads, past if ".decoder." in name else source, head_dim)
        for name in cache_names("", layers)
    ]
    step_inputs = ["input_ids", "encoder_attention_mask", "encoder_hidden_states"]
    step_shapes = [{0: batch_dim, 1: target_dim}, {0: batch_dim, 1: source_dim}, {0: batch_dim, 1: source_dim}]
    past_shapes = [
        {0: batch_dim, 2: past_dim if ".decoder." in name else source_dim} for name in cache_names("", layers)
    ]

    with torch.no_grad():
        encoder = _trace(
            _EncoderGraph(model),
            (input_ids, attention_mask),
            ["input_ids", "attention_mask"],
            ["last_hidden_state"],
            ({0: batch_dim, 1: source_dim}, {0: batch_dim, 1: source_dim}),
        )
        first_step = _trace(
            _DecoderStepGraph(model),
            (decoder_input_ids, attention_mask, encoder_hidden_states),
            step_inputs,
            ["logits", *cache_names("present", layers)],
            step_shapes,
        )
        cached_step = _trace(
            _DecoderStepGraph(model),
            (decoder_input_ids, attention_mask, encoder_hidden_states, *past_key_values),
            step_inputs + cache_names("past_key_values", layers),
            ["logits", *cache_names("present", layers, encoder=False)],
            [*step_shapes, tuple(past_shapes)],  # *past_key_values is one argument to torch.export
        )
    return encoder, first_step, cached_step


def _is_weight(tensor: TensorProto) -> bool:
    """What goes to the outer graph of the merged decoder: everything but scalars and small integer index vectors
    (kept in their branch, as optimum does)."""
    return len(tensor.dims) > 1 or (
        len(tensor.dims) == 1 and tensor.data_type not in (TensorProto.INT32, TensorProto.INT64)
    )


def _rename_inputs(graph: onnx.GraphProto, renames: dict[str, str]):
    for node in graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
                _rename_inputs(subgraph, renames)


def _shared_weights(branches: list[onnx.GraphProto]) -> list[TensorProto]:
    """Move the weights of both branches to the merged graph, one copy of each distinct tensor; the branches then
    read them from the enclosing scope."""
    shared, names_by_content = [], {}
    for index, graph in enumerate(branches):
        renames, kept = {}, []
        for tensor in graph.initializer:
            if not _is_weight(tensor):
                kept.append(tensor)
                continue
            key = (
                tensor.data_type,
                tuple(tensor.dims),
                hashlib.sha256(numpy_helper.to_array(tensor).tobytes()).digest(),
            )
            if key not in names_by_content:
                # Named after the branch too: the two branches may use one name for different tensors.
                names_by_content[key] = f"{tensor.name}_merged_{index}"
                shared.append(TensorProto())
                shared[-1].CopyFrom(tensor)
                shared[-1].name = names_by_content[key]
            renames[tensor.name] = names_by_content[key]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        _rename_inputs(graph, renames)
    return shared


def merge_decoders(first_step: onnx.ModelProto, cached_step: onnx.ModelProto, config) -> onnx.ModelProto:
    """The decoder with and without cache as one graph: `If(use_cache_branch, then=cached step, else=first step)`."""
    layers, heads = config.decoder_layers, config.decoder_attention_heads
    head_dim = config.d_model // heads
    no_past, with_past = onnx.GraphProto(), onnx.GraphProto()
    no_past.CopyFrom(first_step.graph)
    with_past.CopyFrom(cached_step.graph)

    # Both branches need the same outputs: the cached step returns empty cross-attention placeholders, (0, h, 1, dh)
    # as in optimum, and transformers.js keeps the first step's.
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, TARGET, config.vocab_size]),
        *(
            helper.make_tensor_value_info(
                name, TensorProto.FLOAT, [BATCH, heads, PRESENT if ".decoder." in name else SOURCE, head_dim]
            )
            for name in cache_names("present", layers)
        ),
    ]
    for name in cache_names("present", layers):
        if ".encoder." in name:
            empty = helper.make_tensor(f"{name}_empty", TensorProto.FLOAT, [0, heads, 1, head_dim], [])
            with_past.node.append(helper.make_node("Constant", [], [name], value=empty))
    for branch in (no_past, with_past):
        del branch.input[:]
        del branch.output[:]
        branch.output.extend(outputs)
    no_past.name, with_past.name = "no_past", "with_past"
    weights = _shared_weights([no_past, with_past])

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [BATCH, TARGET]),
        helper.make_tensor_value_info("encoder_attention_mask", TensorProto.INT64, [BATCH, SOURCE]),
        helper.make_tensor_value_info("encoder_hidden_states", TensorProto.FLOAT, [BATCH, SOURCE, config.d_model]),
        *(
            helper.make_tensor_value_info(
                name, TensorProto.FLOAT, [BATCH, heads, PAST if ".decoder." in name else SOURCE, head_dim]
            )
            for name in cache_names("past_key_values", layers)
        ),
        helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]),
    ]
    branch = helper.make_node(
        "If",
        ["use_cache_branch"],
        [o.name for o in outputs],
        name="use_cache_branch_if",
        then_branch=with_past,
        else_branch=no_past,
    )
    graph = helper.make_graph([branch], "decoder_model_merged", inputs, outputs, initializer=weights)
    opsets = {(o.domain, o.version): o for o in [*first_step.opset_import, *cached_step.opset_import]}
    merged = helper.make_model(graph, opset_imports=list(opsets.values()), producer_name="hf_vanilla_transformer")
    merged.ir_version = first_step.ir_version
    functions = {(f.domain, f.name): f for f in [*first_step.functions, *cached_step.functions]}
    merged.functions.extend(functions.values())
    onnx.checker.check_model(merged)
    return merged


def quantize_onnx(onnx_dir: str | Path) -> list[Path]:
    """ONNX Runtime's dynamic int8 quantization of both graphs, written beside them as `<name>_quantized.onnx`: int8
    weights, activations quantized on the fly (the recipe of transformers.js's own conversion script)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx_dir, paths = Path(onnx_dir), []
    for name in (ENCODER_FILE, DECODER_FILE):
        paths.append(onnx_dir / name.replace(".onnx", f"{QUANTIZED_SUFFIX}.onnx"))
        # EnableSubgraph: the merged decoder's matrix products sit inside the branches of its If node.
        with _quiet(""):  # the root logger, which the quantizer writes to
            quantize_dynamic(
                onnx_dir / name,
                paths[-1],
                weight_type=QuantType.QInt8,
                extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True},
            )
    return paths


def export_onnx(
    model_dir: str | Path,
    output_dir: str | Path,
    quantize: bool = False,
    model_type: str = "marian",
    overwrite: bool = False,
) -> Path:
    """Write the trained model in `model_dir` as an ONNX folder (layout in the module docstring) and return its path.

    Args:
        model_dir: a folder saved by this package (`save_pretrained`), with its tokenizer for translating text.
        output_dir: a new (or empty) folder to write; `overwrite=True` replaces what it holds.
        quantize: also write the dynamic int8 graphs `onnx/*_quantized.onnx`.
        model_type: `"marian"` (the MarianMTModel folder, for transformers.js and Marian consumers; post-norm models
            only) or `"vanilla_transformer"` (this package's folder; any model, for ONNX Runtime).
    """
    if model_type not in MODEL_TYPES:
        raise InputError(f"--model_type must be one of {MODEL_TYPES}, got {model_type!r}.")
    check_output_dir(output_dir, overwrite)
    model = load_translation_model(
        model_dir,
        model_class=VanillaTransformerForConditionalGeneration,
        dtype=torch.float32,
        attn_implementation="eager",
    ).eval()
    model_dir = resolve_model(model_dir)
    with writes_folder(output_dir, overwrite) as folder:
        if model_type == "marian":
            try:
                export_marian(model_dir, folder, overwrite=True)
            except ValueError as error:
                raise ValueError(
                    f"{error} transformers.js runs only the Marian form: for ONNX Runtime, export with "
                    "--model_type vanilla_transformer (model_type='vanilla_transformer')."
                ) from error
        else:
            model.save_pretrained(folder)
            if any((Path(model_dir) / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
                load_tokenizer(model_dir).save_pretrained(folder)
            else:
                logger.warning(f"{model_dir} has no tokenizer: the ONNX folder will translate token ids, not text.")
        onnx_dir = folder / "onnx"
        onnx_dir.mkdir(parents=True, exist_ok=True)
        encoder, first_step, cached_step = _export_graphs(model)
        onnx.save(encoder, onnx_dir / ENCODER_FILE)
        onnx.save(merge_decoders(first_step, cached_step, model.config), onnx_dir / DECODER_FILE)
        if quantize:
            quantize_onnx(onnx_dir)
    return Path(output_dir)
