"""Batches by token budget and by length: within the budget, every pair once per epoch, an order drawn from (seed,
epoch) alone, an equal share for every process, and the trainer's data loader built on them."""

import numpy as np
import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from datasets import Dataset
from transformers import Seq2SeqTrainingArguments
from transformers.trainer_pt_utils import get_length_grouped_indices

from hf_vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from hf_vanilla_transformer.errors import InputError
from hf_vanilla_transformer.training.batching import (
    LengthSortedSampler,
    SeededLengthGroupedSampler,
    TokenBatchSampler,
    accumulation_steps_for,
    auto_max_tokens,
    training_bytes_per_token,
)
from hf_vanilla_transformer.training.loss import chunked_token_cross_entropy
from hf_vanilla_transformer.training.trainer import TranslationDataCollator, TranslationTrainer
from tests.helpers import tiny_config, tiny_tokenizer


def lengths(n=3000, seed=0):
    """Source and target lengths as in a real corpus: mostly short, a long tail, the two sides correlated."""
    rng = np.random.default_rng(seed)
    source = np.clip(rng.lognormal(2.3, 0.6, n).astype(int), 2, 120)
    target = np.clip((source * rng.uniform(0.7, 1.4, n)).astype(int), 2, 120)
    return source, target


def epoch_batches(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("max_tokens", [120, 500, 4096])
def test_no_batch_exceeds_the_budget_and_every_pair_comes_once_per_epoch(max_tokens):
    source, target = lengths()
    sampler = TokenBatchSampler(source, target, max_tokens, seed=1)
    for epoch in range(2):
        batches = epoch_batches(sampler, epoch)
        assert len(batches) == len(sampler)
        for batch in batches:
            assert len(batch) * source[batch].max() <= max_tokens and len(batch) * target[batch].max() <= max_tokens
        assert sorted(i for batch in batches for i in batch) == list(range(len(source)))
    shapes = sampler.shapes()
    assert shapes["pairs"].sum() == len(source) and (shapes["padded_target"] <= max_tokens).all()
    assert shapes["target"].sum() == target.sum()


def test_batches_group_similar_lengths_with_little_padding():
    source, target = lengths(30_000)
    shapes = TokenBatchSampler(source, target, 2000, seed=0).shapes()
    padding = (
        1 - (shapes["source"] + shapes["target"]).sum() / (shapes["padded_source"] + shapes["padded_target"]).sum()
    )
    size = int(shapes["pairs"].mean())
    random = np.random.default_rng(0).permutation(len(source))[: len(source) // size * size].reshape(-1, size)
    real = source[random].sum() + target[random].sum()
    random_padding = 1 - real / (size * (source[random].max(1) + target[random].max(1))).sum()
    assert padding < 0.1 < 0.5 < random_padding
    padded = np.maximum(shapes["padded_source"], shapes["padded_target"])
    assert np.median(padded) > 0.95 * 2000  # batches are filled


def test_the_order_depends_only_on_seed_and_epoch():
    source, target = lengths()
    a, b = TokenBatchSampler(source, target, 800, seed=3), TokenBatchSampler(source, target, 800, seed=3)
    assert epoch_batches(a, 0) == epoch_batches(b, 0) and epoch_batches(a, 5) == epoch_batches(b, 5)
    assert epoch_batches(a, 0) != epoch_batches(a, 1)  # a new order each epoch...
    assert sorted(map(sorted, epoch_batches(a, 0))) == sorted(
        map(sorted, epoch_batches(a, 1))
    )  # ...of the same batches
    torch.manual_seed(123)
    np.random.seed(123)  # the global generators play no part
    assert epoch_batches(TokenBatchSampler(source, target, 800, seed=3), 1) == epoch_batches(a, 1)
    assert epoch_batches(TokenBatchSampler(source, target, 800, seed=4), 0) != epoch_batches(a, 0)


@pytest.mark.parametrize("multiple", [2, 3, 8, 64])
def test_the_number_of_batches_is_a_multiple_of_processes_times_accumulation(multiple):
    source, target = lengths(1001)
    sampler = TokenBatchSampler(source, target, 700, seed=0, batches_multiple=multiple)
    batches = epoch_batches(sampler, 0)
    assert len(batches) % multiple == 0 and len(batches) >= len(TokenBatchSampler(source, target, 700, seed=0))
    assert sorted(i for batch in batches for i in batch) == list(range(1001))
    assert all(len(b) * max(source[b].max(), target[b].max()) <= 700 for b in batches)


def test_every_process_gets_a_disjoint_equal_share_through_accelerate():
    source, target = lengths()
    sampler = TokenBatchSampler(source, target, 600, seed=0, batches_multiple=2 * 3)  # 2 processes x 3 accumulation
    shards = [list(BatchSamplerShard(sampler, num_processes=2, process_index=rank)) for rank in range(2)]
    assert len(shards[0]) == len(shards[1]) == len(sampler) // 2
    seen = [i for shard in shards for batch in shard for i in batch]
    assert sorted(seen) == list(range(len(source)))  # disjoint, complete: nothing repeated to even them out
    # Update k takes global batches [6k, 6k + 6): one process accumulating six batches would see the same pairs.
    whole = list(sampler)
    for k in range(len(whole) // 6):
        update = [b for rank in range(2) for b in shards[rank][3 * k : 3 * k + 3]]
        assert sorted(map(tuple, update)) == sorted(map(tuple, whole[6 * k : 6 * k + 6]))


def test_lengths_padded_to_a_multiple_stay_within_the_budget():
    source, target = lengths()
    sampler = TokenBatchSampler(source, target, 1024, seed=1, pad_to_multiple_of=8)
    for batch in sampler:
        padded = [8 * -(-int(side[batch].max()) // 8) for side in (source, target)]
        assert len(batch) * max(padded) <= 1024
    shapes = sampler.shapes()
    assert shapes["target"].sum() == target.sum() and (shapes["padded_target"] % 8 == 0).all()
    assert list(TokenBatchSampler(source, target, 1024, seed=1, pad_to_multiple_of=1)) == list(
        TokenBatchSampler(source, target, 1024, seed=1)
    )


def saved_bytes_per_token(config) -> float:
    """Bytes that autograd keeps for the backward pass per (source + target) token of a bf16 autocast training
    step as the translation trainer takes it (the model's logits, the chunked loss), measured on the CPU: the
    difference between two batch sizes, without the per-batch half-precision weights."""
    model = VanillaTransformerForConditionalGeneration(config).train()

    def saved(batch, length=24):
        ids = torch.randint(4, config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))
        storages = {}

        def keep(tensor):
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
            with torch.autocast("cpu", torch.bfloat16):
                inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
                logits = model(**inputs, decoder_input_ids=model.prepare_decoder_input_ids_from_labels(ids)).logits
                chunked_token_cross_entropy(logits, ids)
        return sum(storages.values())

    return (saved(8) - saved(4)) / (4 * 24)


@pytest.mark.parametrize(
    "sizes", [dict(d_model=64, ffn=256, layers=(2, 2)), dict(d_model=128, ffn=256, layers=(1, 3))]
)
def test_the_estimated_memory_per_token_covers_what_a_training_step_keeps(sizes):
    config = VanillaTransformerConfig(
        vocab_size=3000,
        d_model=sizes["d_model"],
        encoder_ffn_dim=sizes["ffn"],
        decoder_ffn_dim=sizes["ffn"],
        encoder_layers=sizes["layers"][0],
        decoder_layers=sizes["layers"][1],
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    measured = saved_bytes_per_token(config)
    estimate = training_bytes_per_token(config)
    # The estimate adds the loss's backward pass (the logits' gradient, 2 bytes per vocabulary entry) to what is kept.
    assert measured <= estimate and estimate - 2 * config.vocab_size == pytest.approx(measured, rel=0.2)


def test_auto_max_tokens_fills_the_free_memory_up_to_one_update():
    base = VanillaTransformerConfig.from_paper("base", vocab_size=37000)
    big = VanillaTransformerConfig.from_paper("big", vocab_size=37000)
    gib = 2**30
    # An 80 GB card holds the paper's whole update in one batch, at both sizes.
    assert auto_max_tokens(78 * gib, base, 63_000_000, tokens_per_update=25000) == 32768
    assert auto_max_tokens(78 * gib, big, 213_000_000, tokens_per_update=25000) == 32768
    # Eight GPUs each take an eighth of the update: fairseq's 4,096 tokens per GPU.
    assert auto_max_tokens(78 * gib, base, 63_000_000, tokens_per_update=25000 // 8) == 4096
    # A 16 GB card: fewer tokens, a multiple of 64, within 80% of the memory left by the weights and optimizer.
    tokens = auto_max_tokens(15 * gib, base, 63_000_000, tokens_per_update=25000)
    assert 8192 < tokens < 32768 and tokens % 64 == 0
    assert tokens * training_bytes_per_token(base) <= 0.8 * (15 * gib - 18 * 63_000_000)
    assert auto_max_tokens(78 * gib, base, 63_000_000) > 32768  # no update to stop at
    assert auto_max_tokens(15 * gib, base, 63_000_000, half_precision=False) < tokens  # float32 activations
    with pytest.raises(InputError, match="--max_tokens auto: 1.0 GiB free on the device do not hold"):
        auto_max_tokens(gib, big, 213_000_000)


def test_a_pair_over_the_budget_and_too_few_pairs_are_named():
    with pytest.raises(InputError, match=r"--max_tokens 50: pair 2 alone has 60 source and 8 target tokens"):
        TokenBatchSampler([10, 60, 70], [8, 8, 8], 50)
    with pytest.raises(InputError, match="3 training pairs cannot fill the 4 batches of one update"):
        TokenBatchSampler([5, 5, 5], [5, 5, 5], 50, batches_multiple=4)


def test_accumulation_gives_about_the_tokens_per_update():
    epoch = dict(target_tokens=3100 * 10_000, batches=10_000)  # 3,100 target tokens per batch
    assert accumulation_steps_for(25000, **epoch, world_size=8) == 1
    assert accumulation_steps_for(25000, **epoch, world_size=1) == 8
    assert accumulation_steps_for(25000, **epoch, world_size=2) == 4
    assert accumulation_steps_for(100, **epoch, world_size=1) == 1
    # 12 batches of 100 tokens: 5 steps would mean 3 updates of 400 tokens (12 -> 15 batches); 4 steps give 400 too
    assert accumulation_steps_for(500, target_tokens=1200, batches=12, world_size=1) == 4


def test_length_grouped_order_is_transformers_order_seeded_by_epoch():
    source, target = lengths(5000)
    total = source + target
    sampler = SeededLengthGroupedSampler(64, total, seed=42)
    for epoch in (0, 2):
        sampler.set_epoch(epoch)
        generator = torch.Generator().manual_seed(42 + epoch)
        assert list(sampler) == get_length_grouped_indices(total.tolist(), 64, generator=generator)
    assert list(LengthSortedSampler([3, 9, 1, 9])) == [1, 3, 0, 2]


def tiny_trainer(tmp_path, **kwargs):
    tokenizer = tiny_tokenizer()
    source, target = lengths(200, seed=1)
    rng = np.random.default_rng(0)
    rows = {
        "input_ids": [rng.integers(4, 100, s).tolist() + [2] for s in source],
        "labels": [rng.integers(4, 100, t).tolist() + [2] for t in target],
        "length": (source + target + 2).tolist(),
    }
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, seed=7)
    return TranslationTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict(rows),
        processing_class=tokenizer,
        data_collator=TranslationDataCollator(tokenizer, model=model, label_pad_token_id=-100),
        **kwargs,
    )


def test_the_trainer_loads_token_batches_and_derives_the_accumulation(tmp_path):
    trainer = tiny_trainer(tmp_path, max_tokens=300, tokens_per_update=1000)
    loader = trainer.get_train_dataloader()
    assert trainer.args.gradient_accumulation_steps > 1
    batches = list(loader)
    assert len(batches) % trainer.args.gradient_accumulation_steps == 0
    assert sum(len(batch["input_ids"]) for batch in batches) == 200
    for batch in batches:
        assert batch["input_ids"].numel() <= 300 and batch["labels"].numel() <= 300
        assert set(batch) == {"input_ids", "attention_mask", "labels", "decoder_input_ids", "decoder_attention_mask"}
    tokens = sum(int((batch["labels"] != -100).sum()) for batch in batches) / len(batches)
    assert abs(tokens * trainer.args.gradient_accumulation_steps - 1000) <= tokens  # about 1,000 per update
    with pytest.raises(InputError, match="--tokens_per_update .* set --max_tokens"):
        tiny_trainer(tmp_path, tokens_per_update=1000)


def test_max_tokens_auto_without_a_gpu_is_the_cpu_budget(tmp_path):
    trainer = tiny_trainer(tmp_path, max_tokens="auto", tokens_per_update=1000)
    trainer.get_train_dataloader()
    assert trainer.max_tokens == 4096
