"""The decoder-only model: the decoder stack without cross-attention, KV cache, padding, sampling, loss, Trainer,
saving, remote code, pipeline("text-generation"), and the language-modelling recipe (`train language-modeling`)."""

import json
import textwrap

import pytest
import torch
from datasets import Dataset
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    DataCollatorForSeq2Seq,
    DynamicCache,
    Trainer,
    TrainingArguments,
    pipeline,
)

from hf_vanilla_transformer import VanillaTransformerForCausalLM
from hf_vanilla_transformer.model.input_checks import CACHE_NAME
from hf_vanilla_transformer.recipes.language_modeling import (
    complete,
    sampling_generation_config,
    single_stack_config,
    tokenize_texts,
    train_language_model_tokenizer,
)
from tests.helpers import copy_attention, copy_feed_forward, run_without_package, tiny_config


SENTENCES = [
    "Where is the station?",
    "The weather is nice today.",
    "Tom is not here.",
    "I am hungry.",
    "Can you help me?",
    "Who gave this to you?",
    "Tom is hungry.",
    "The station is not here.",
]


def make_model(attn_implementation="sdpa", **overrides):
    config = tiny_config(is_encoder_decoder=False, **overrides)
    return VanillaTransformerForCausalLM._from_config(config, attn_implementation=attn_implementation).eval()


def padded_batch(side="left"):
    """Three rows of 7, 5 and 3 tokens starting with <s>, padded on `side`."""
    g = torch.Generator().manual_seed(0)
    rows = [torch.cat([torch.tensor([1]), torch.randint(4, 99, (n - 1,), generator=g)]) for n in (7, 5, 3)]
    input_ids = torch.zeros(3, 7, dtype=torch.long)
    attention_mask = torch.zeros(3, 7, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(7 - len(row), 7) if side == "left" else slice(0, len(row))
        input_ids[i, span], attention_mask[i, span] = row, 1
    return rows, input_ids, attention_mask


@pytest.fixture(scope="module")
def tokenizer():
    return train_language_model_tokenizer(SENTENCES * 4, vocab_size=150, model_max_length=64)


# --- the architecture ------------------------------------------------------------------------------------------------


def test_auto_class_builds_the_decoder_stack_without_cross_attention():
    model = AutoModelForCausalLM.from_config(tiny_config(is_encoder_decoder=False))
    assert type(model) is VanillaTransformerForCausalLM and model.can_generate()
    names = set(model.state_dict())
    for name in [
        "model.embed_tokens.weight",
        "model.layers.1.self_attn.q_proj.weight",
        "model.layers.1.self_attn.out_proj.bias",
        "model.layers.0.self_attn_layer_norm.weight",
        "model.layers.0.fc1.weight",
        "model.layers.0.fc2.bias",
        "model.layers.0.final_layer_norm.weight",
        "lm_head.weight",
    ]:
        assert name in names, name
    assert not any("encoder" in name for name in names)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert "model.layer_norm.weight" in make_model(norm_first=True).state_dict()


def test_an_encoder_decoder_config_builds_its_decoder_as_transformers_causal_lms_do():
    """As `BartForCausalLM` / `MarianForCausalLM`: the default config gives the decoder stack, sized by `decoder_*`."""
    config = tiny_config(decoder_layers=3, encoder_layers=1, decoder_ffn_dim=24)
    torch.manual_seed(0)
    from_encoder_decoder = VanillaTransformerForCausalLM(config).eval()
    torch.manual_seed(0)
    decoder_only = VanillaTransformerForCausalLM(
        tiny_config(decoder_layers=3, decoder_ffn_dim=24, is_encoder_decoder=False)
    )
    decoder_only.eval()
    assert config.is_encoder_decoder and not from_encoder_decoder.config.is_encoder_decoder
    assert len(from_encoder_decoder.model.layers) == 3
    assert from_encoder_decoder.model.layers[0].fc1.out_features == 24
    assert not hasattr(from_encoder_decoder.model.layers[0], "encoder_attn")
    input_ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 2]])
    torch.testing.assert_close(from_encoder_decoder(input_ids).logits, decoder_only(input_ids).logits)
    generated = from_encoder_decoder.generate(input_ids, max_new_tokens=3, do_sample=False)
    assert generated.shape == (2, 7)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_a_layer_is_torch_nn_encoder_layer_with_a_causal_mask(norm_first):
    """A GPT block is the paper's layer with masked self-attention only: `nn.TransformerEncoderLayer` + causal mask."""
    model = make_model("eager", norm_first=norm_first, dropout=0.0)
    ours = model.model.layers[0]
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_attention(ours.self_attn, ref.self_attn)
    copy_feed_forward(ours, ref)
    ours.self_attn_layer_norm.load_state_dict(ref.norm1.state_dict())
    ours.final_layer_norm.load_state_dict(ref.norm2.state_dict())
    x = torch.randn(2, 6, 16)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    additive = torch.zeros(6, 6).masked_fill(causal, torch.finfo(torch.float32).min)[None, None]
    with torch.no_grad():
        torch.testing.assert_close(ours(x, additive), ref(x, src_mask=causal), atol=1e-5, rtol=1e-5)


def test_later_tokens_do_not_change_earlier_logits():
    model = make_model()
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    other = ids.clone()
    other[0, -1] = 9
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=other).logits
    torch.testing.assert_close(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])


# --- cache, padding, logits_to_keep ----------------------------------------------------------------------------------


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_decoding_with_the_cache_equals_the_full_forward_on_a_left_padded_batch(attn):
    model = make_model(attn)
    _, input_ids, attention_mask = padded_batch("left")
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask).logits
        out = model(input_ids=input_ids[:, :3], attention_mask=attention_mask[:, :3], use_cache=True)  # a prompt
        steps, cache = [out.logits], out.past_key_values
        assert isinstance(cache, DynamicCache)
        for t in range(3, 7):
            out = model(
                input_ids=input_ids[:, t : t + 1],
                attention_mask=attention_mask[:, : t + 1],
                **{CACHE_NAME: cache},
                use_cache=True,
            )
            steps.append(out.logits)
    real = attention_mask.bool()
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_give_the_logits_of_each_row_alone(side, attn):
    model = make_model(attn)
    rows, input_ids, attention_mask = padded_batch(side)
    with torch.no_grad():
        batched = model(input_ids=input_ids, attention_mask=attention_mask).logits
        for i, row in enumerate(rows):
            alone = model(input_ids=row[None]).logits[0]
            torch.testing.assert_close(batched[i, attention_mask[i].bool()], alone, atol=1e-5, rtol=1e-5)


def test_logits_to_keep_returns_the_last_positions_only():
    model = make_model()
    _, input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask).logits
        last = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=2).logits
    assert last.shape == (3, 2, 99)
    torch.testing.assert_close(last, full[:, -2:])


# --- generate(): greedy, sampling, cache on/off ----------------------------------------------------------------------


def test_greedy_generate_equals_a_manual_greedy_loop_without_cache():
    model = make_model()
    _, input_ids, attention_mask = padded_batch("left")
    generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, eos_token_id=None)
    tokens, mask = input_ids, attention_mask
    with torch.no_grad():
        for _ in range(8):
            next_token = model(input_ids=tokens, attention_mask=mask).logits[:, -1].argmax(-1, keepdim=True)
            tokens, mask = torch.cat([tokens, next_token], 1), torch.cat([mask, torch.ones_like(next_token)], 1)
    assert torch.equal(generated, tokens)


SAMPLING = {
    "greedy": dict(do_sample=False),
    "temperature": dict(do_sample=True, temperature=0.7),
    "top-k": dict(do_sample=True, top_k=5),
    "top-p": dict(do_sample=True, top_p=0.8),
    "all-three": dict(do_sample=True, temperature=1.3, top_k=20, top_p=0.9),
}


@pytest.mark.parametrize("settings", SAMPLING.values(), ids=SAMPLING.keys())
def test_generate_with_a_seed_gives_the_same_tokens_with_and_without_cache(settings):
    model = make_model()
    _, input_ids, attention_mask = padded_batch("left")
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10, eos_token_id=None)
    runs = []
    for use_cache in (True, True, False):
        torch.manual_seed(7)
        runs.append(model.generate(**kwargs, **settings, use_cache=use_cache))
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_sampling_truncated_to_one_token_is_greedy_and_a_different_seed_samples_differently():
    model = make_model(init_std=0.5)  # a peaked distribution, so that greedy decoding is unambiguous
    _, input_ids, attention_mask = padded_batch("left")
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=10, eos_token_id=None)
    greedy = model.generate(**kwargs)
    assert torch.equal(model.generate(**kwargs, do_sample=True, top_k=1), greedy)
    assert torch.equal(model.generate(**kwargs, do_sample=True, top_p=1e-6), greedy)
    samples = set()
    for seed in range(3):
        torch.manual_seed(seed)
        samples.add(tuple(model.generate(**kwargs, do_sample=True, temperature=2.0).flatten().tolist()))
    assert len(samples) == 3


def test_left_padded_rows_generate_the_same_tokens_as_alone():
    model = make_model()
    rows, input_ids, attention_mask = padded_batch("left")
    batched = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, eos_token_id=None)
    for i, row in enumerate(rows):
        alone = model.generate(input_ids=row[None], max_new_tokens=8, eos_token_id=None)[0]
        assert torch.equal(batched[i, -len(alone) :], alone)


def test_static_cache_gives_the_same_tokens_as_the_dynamic_cache():
    model = make_model()
    input_ids = torch.tensor([[1, 5, 6, 7], [1, 8, 9, 10]])
    kwargs = dict(input_ids=input_ids, max_new_tokens=8, eos_token_id=None)
    assert torch.equal(model.generate(**kwargs, cache_implementation="static"), model.generate(**kwargs))


def test_static_cache_gives_the_same_tokens_as_the_dynamic_cache_on_a_left_padded_batch():
    model = make_model()
    _, input_ids, attention_mask = padded_batch("left")
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, eos_token_id=None)
    assert torch.equal(model.generate(**kwargs, cache_implementation="static"), model.generate(**kwargs))


def test_generation_stops_at_eos_and_pads_finished_rows():
    model = make_model()
    with torch.no_grad():  # make </s> (id 2) the most likely next token everywhere
        model.lm_head.weight[2] = 0
        model.model.embed_tokens.weight[2] = 0
        model.lm_head.bias = nn.Parameter(torch.zeros(99).index_fill_(0, torch.tensor([2]), 100.0))
    _, input_ids, attention_mask = padded_batch("left")
    generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5)
    assert generated.shape == (3, 8) and torch.all(generated[:, -1] == 2)


# --- loss ------------------------------------------------------------------------------------------------------------


def lm_labels(input_ids, attention_mask):
    """As `tokenize_texts` and the collator make them: padding and <s> are no targets (left of a row's <s> is padding,
    whose outputs are meaningless)."""
    return input_ids.masked_fill((attention_mask == 0) | (input_ids == 1), -100)


def hand_loss(logits, labels, epsilon=0.0):
    """Position t predicts label t + 1; -100 is ignored; label smoothing spreads epsilon evenly over the vocabulary."""
    terms = []
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1] - 1):
            target = int(labels[b, t + 1])
            if target != -100:
                log_probs = logits[b, t].double().log_softmax(-1)
                terms.append(-(1 - epsilon) * log_probs[target] - epsilon * log_probs.mean())
    return torch.stack(terms).mean()


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("epsilon", [0.0, 0.1], ids=["plain", "label-smoothing"])
def test_loss_is_the_shifted_cross_entropy_by_hand(side, epsilon):
    model = make_model(label_smoothing=epsilon)
    _, input_ids, attention_mask = padded_batch(side)
    labels = lm_labels(input_ids, attention_mask)
    labels[0, 3] = -100  # any position can be left out
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(out.loss.double(), hand_loss(out.logits, labels, epsilon), atol=1e-6, rtol=1e-6)


def test_loss_with_num_items_in_batch_adds_up_over_micro_batches():
    """What `Trainer` does under gradient accumulation: it counts the shifted labels (`labels[..., 1:]`) of the whole
    batch and passes the count; the micro-batch losses then add up to the loss of the batch."""
    model = make_model()
    _, input_ids, attention_mask = padded_batch("right")
    labels = lm_labels(input_ids, attention_mask)
    full = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    count = (labels[:, 1:] != -100).sum()
    parts = [
        model(
            input_ids=input_ids[i : i + 1],
            attention_mask=attention_mask[i : i + 1],
            labels=labels[i : i + 1],
            num_items_in_batch=count,
        ).loss
        for i in range(3)
    ]
    torch.testing.assert_close(sum(parts), full, atol=1e-6, rtol=1e-6)
    trainer = Trainer(model=model, args=TrainingArguments(output_dir="unused", report_to="none", use_cpu=True))
    assert trainer._loss_shifts_labels  # transformers counts `labels[..., 1:]` for this model, as the loss needs


def test_gradient_checkpointing_gives_the_same_gradients():
    model = make_model(dropout=0.0).train()
    _, input_ids, attention_mask = padded_batch("right")
    labels = lm_labels(input_ids, attention_mask)

    def grads():
        model.zero_grad()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    plain = grads()
    model.activation_checkpointing_enable()
    checkpointed = grads()
    assert all(grad is not None and grad.abs().sum() > 0 for grad in plain.values())
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)


# --- transformers' conventions ---------------------------------------------------------------------------------------


def test_outputs_follow_transformers_conventions():
    model = make_model("eager")
    _, input_ids, attention_mask = padded_batch("left")
    labels = lm_labels(input_ids, attention_mask)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        labels=labels,
        output_hidden_states=True,
        output_attentions=True,
    )
    assert len(out.hidden_states) == 3 and out.hidden_states[-1].shape == (3, 7, 16)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (3, 4, 7, 7)
    assert torch.all(out.attentions[0][0].triu(1) == 0)  # causal (row 0 has no padding)
    assert torch.all(out.attentions[1][2, :, 4:, :4] == 0)  # real tokens give padding no weight
    as_tuple = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_dict=False)
    real = attention_mask.bool()  # padded positions are zeros when states are packed, arbitrary when recorded
    torch.testing.assert_close(as_tuple[0], out.loss)
    torch.testing.assert_close(as_tuple[1][real], out.logits[real])
    assert model.get_output_embeddings() is model.lm_head


def test_resize_token_embeddings_keeps_the_output_projection_tied():
    model = make_model()
    model.resize_token_embeddings(120, mean_resizing=False)
    assert model.lm_head.weight is model.model.embed_tokens.weight and model.lm_head.weight.shape == (120, 16)


def test_resize_token_embeddings_updates_the_config():
    model = make_model()
    model.resize_token_embeddings(120, mean_resizing=False)
    assert model.config.vocab_size == 120
    assert model(input_ids=torch.tensor([[1, 110, 119]])).logits.shape == (1, 3, 120)


# --- saving, remote code, pipeline -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tokenizer, tmp_path_factory):
    """A model and tokenizer saved like the demo's output folder."""
    torch.manual_seed(0)
    config = single_stack_config(
        tokenizer, is_encoder_decoder=False, d_model=16, layers=2, heads=4, ffn_dim=32, max_position_embeddings=64
    )
    model = VanillaTransformerForCausalLM(config).eval()
    model.generation_config = sampling_generation_config(config, max_new_tokens=6)
    path = tmp_path_factory.mktemp("lm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, path


def test_save_load_round_trip_stores_the_tied_matrix_once(saved):
    from safetensors import safe_open

    model, path = saved
    with safe_open(path / "model.safetensors", "pt") as f:
        assert "model.embed_tokens.weight" in f.keys() and "lm_head.weight" not in f.keys()
    reloaded, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
    assert type(reloaded) is VanillaTransformerForCausalLM
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set()
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight
    assert reloaded.generation_config.do_sample
    ids = torch.tensor([[1, 5, 6, 7]])
    torch.testing.assert_close(reloaded.eval()(input_ids=ids).logits, model(input_ids=ids).logits, atol=0, rtol=0)


def test_a_saved_causal_lm_names_only_classes_that_load_its_weights(saved):
    _, path = saved
    auto_map = json.loads((path / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", "AutoModelForCausalLM"}


PROMPTS = ["Where is", "Tom", "The weather is nice today and"]

REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
    path, prompts = sys.argv[1], json.loads(sys.argv[2])
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    ids = model.generate(**batch, do_sample=False, max_new_tokens=6, eos_token_id=None).tolist()
    generator = pipeline("text-generation", model=path, trust_remote_code=True)
    torch.manual_seed(0)
    texts = generator(prompts, max_new_tokens=6)
    print(json.dumps({"ids": ids, "texts": texts}))
    """
)


@pytest.mark.slow
def test_remote_code_generates_in_a_process_without_the_package(saved, tokenizer, tmp_path):
    model, path = saved
    result = run_without_package(REMOTE_SCRIPT, str(path), json.dumps(PROMPTS), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    assert remote["ids"] == model.generate(**batch, do_sample=False, max_new_tokens=6, eos_token_id=None).tolist()
    torch.manual_seed(0)
    local = pipeline("text-generation", model=str(path))(PROMPTS, max_new_tokens=6)
    assert remote["texts"] == local


def test_text_generation_pipeline_continues_each_prompt_like_generate(saved, tokenizer):
    model, _ = saved
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    results = generator(PROMPTS, do_sample=False, max_new_tokens=6, batch_size=2)
    expected = complete(model, tokenizer, PROMPTS, do_sample=False, max_new_tokens=6)
    for prompt, result, text in zip(PROMPTS, results, expected):
        (record,) = result
        assert record["generated_text"].startswith(prompt)
        assert record["generated_text"].split() == text.split()
    new_only = generator(PROMPTS[0], do_sample=False, max_new_tokens=6, return_full_text=False)[0]["generated_text"]
    assert PROMPTS[0] + new_only == results[0][0]["generated_text"]
    (record,) = generator(PROMPTS[0], do_sample=False, max_new_tokens=6, return_tensors=True)
    assert record["generated_token_ids"][:3] == [tokenizer.bos_token_id, *tokenizer.encode("Where is")[1:]]


# --- tokenizer and data ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tokenizer_starts_prompts_with_bos_adds_no_eos_and_reloads_without_the_package(tokenizer, tmp_path):
    ids = tokenizer("Where is the station")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and tokenizer.eos_token_id not in ids
    assert tokenizer.decode(ids[3:]).startswith(" ")  # a continuation keeps its leading space
    assert tokenizer.decode(ids, skip_special_tokens=True).strip() == "Where is the station"
    tokenizer.save_pretrained(tmp_path)
    script = (
        "from transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "print(t.padding_side, t(['Where is', 'Tom is hungry'], padding=True)['input_ids'])\n"
    )
    result = run_without_package(script, tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = tokenizer(["Where is", "Tom is hungry"], padding=True)["input_ids"]
    assert result.stdout.split(" ", 1) == ["left", f"{expected}\n"]


def test_training_texts_end_with_eos_and_bos_is_never_a_target(tokenizer):
    data = tokenize_texts(Dataset.from_dict({"text": ["Tom is here.", "Where is the station?"]}), tokenizer, 64)
    row = data[0]
    assert row["input_ids"][0] == tokenizer.bos_token_id and row["input_ids"][-1] == tokenizer.eos_token_id
    assert row["labels"] == [-100] + row["input_ids"][1:]
    cut = tokenize_texts(Dataset.from_dict({"text": ["Where is the station?"]}), tokenizer, 4)[0]
    assert len(cut["input_ids"]) == 4 and tokenizer.eos_token_id not in cut["input_ids"]
    with pytest.raises(ValueError, match="no column 'sentence'"):
        tokenize_texts(Dataset.from_dict({"text": ["x"]}), tokenizer, 8, text_column="sentence")


# --- training --------------------------------------------------------------------------------------------------------


def test_trainer_learns_the_sentences_and_greedy_decoding_completes_them(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = single_stack_config(
        tokenizer, is_encoder_decoder=False, d_model=64, layers=2, heads=4, ffn_dim=128, dropout=0.0
    )
    model = VanillaTransformerForCausalLM(config)
    texts = ["Where is the station?", "The weather is nice today.", "I am hungry.", "Can you help me?"]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=100,
        lr_scheduler_type="constant_with_warmup",
        learning_rate=3e-3,
        warmup_steps=5,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=tokenize_texts(Dataset.from_dict({"text": texts}), tokenizer, 64),
        data_collator=DataCollatorForSeq2Seq(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.1 * losses[0]
    model.eval()
    assert complete(model, tokenizer, ["Where", "The weather"], do_sample=False, max_new_tokens=12) == texts[:2]


# --- transformers' conventions found by its common model tests -------------------------------------------------------


def test_shift_labels_are_taken_as_already_aligned_targets():
    # The trainer passes `shift_labels` under sequence parallelism: position i is scored against shift_labels[:, i].
    model = make_model()
    input_ids = torch.randint(4, 100, (2, 6))
    from_labels = model(input_ids=input_ids, labels=input_ids).loss
    shifted = nn.functional.pad(input_ids[:, 1:], (0, 1), value=-100)
    torch.testing.assert_close(model(input_ids=input_ids, shift_labels=shifted).loss, from_labels)
    assert not torch.allclose(model(input_ids=input_ids, shift_labels=input_ids).loss, from_labels)


def test_sequences_packed_in_one_row_by_position_ids_do_not_see_each_other():
    # DataCollatorWithFlattening: no padding, positions restart at each sequence; a packed row may be longer than the
    # model's positions as long as each sequence fits.
    model = make_model(max_position_embeddings=8)
    first, second = torch.randint(4, 100, (1, 5)), torch.randint(4, 100, (1, 6))
    position_ids = torch.tensor([list(range(5)) + list(range(6))])
    packed = model(input_ids=torch.cat([first, second], 1), position_ids=position_ids, use_cache=False)  # as training
    torch.testing.assert_close(packed.logits[:, 5:], model(input_ids=second).logits)
    torch.testing.assert_close(packed.logits[:, :5], model(input_ids=first).logits)


def test_generation_after_a_right_padded_prompt_matches_the_static_cache():
    # The next token comes from the last position even where it is padding: computed, not packed away as zeros.
    torch.manual_seed(0)
    model = make_model(init_std=0.5)
    input_ids = torch.randint(4, 100, (2, 7))
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1] * 7])
    options = dict(attention_mask=mask, max_new_tokens=3, do_sample=False, output_scores=True)
    dynamic = model.generate(input_ids, return_dict_in_generate=True, **options)
    static = model.generate(input_ids, return_dict_in_generate=True, cache_implementation="static", **options)
    assert not (dynamic.scores[0][0] == 0).all()
    torch.testing.assert_close(dynamic.scores[0], static.scores[0])
    assert dynamic.sequences.tolist() == static.sequences.tolist()
