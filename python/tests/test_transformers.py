"""A random-init Hugging Face LlamaForCausalLM (2 layers, hidden 64, 4 heads,
2 KV heads, vocabulary 128; no download) trained under dcp_torch on 2 Gloo
processes: after dcp_torch.prepare_hf_model, with causal_lm_sample's labels
and loss mask and causal_lm_loss, three scripted plans (SP 1 x 2 groups with
accumulation and recompute; SP 2 with padding; SP 2 with per-micro-batch
recompute) give the gradients of a per-sequence HF reference (SDPA, fp64,
HF's own label shift). Then each easy mistake is made and must be an error
naming the fix; where a mistake is silent without the checks, the test first
shows that its gradients are wrong."""

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

import dcp_torch  # noqa: E402
import dist_util  # noqa: E402
from dcp_torch import transformers_support as hf  # noqa: E402
from fake_planner import FakePlannerClient, plan  # noqa: E402

SPEC = dcp_torch.model_spec(
    name="tiny-hf-llama", num_layers=2, hidden_size=64,
    num_attention_heads=4, num_kv_heads=2, ffn_hidden_size=128,
    vocab_size=128)
LENGTHS = [5, 9, 17, 33, 4, 12, 21]  # 101 tokens: SP 2 pads one
PROMPT = {1: 3, 3: 5, 5: 2}  # leading tokens without a loss (-100)
ALL = list(range(len(LENGTHS)))
PLANS = [
    # SP 1 x 2 groups: accumulation on rank 0, 1 and 2 layers recomputed.
    plan(0, ([0], [([0, 1, 2], 0), ([3], 1)]), ([1], [([4, 5, 6], 2)])),
    # SP 2: every sequence in one micro-batch, padded to 102 tokens.
    plan(1, ([0, 1], [(ALL, 0)])),
    # SP 2, three micro-batches recomputing 2, 1 and 0 layers.
    plan(2, ([0, 1], [([0, 3], 2), ([1, 2, 4], 1), ([5, 6], 0)])),
]
# For the mistakes: sequence 3 alone first (rank 0's half of it has
# positions 0..16, as HF's default would number them), with recompute.
MISTAKE_PLAN = [plan(0, ([0, 1], [([3], 2), ([0, 1, 2, 4, 5, 6], 1)]))]


def build(attn_implementation="sdpa"):
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, attn_implementation=attn_implementation)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).double()


def tokens(sample_id):
    generator = torch.Generator().manual_seed(3000 + sample_id)
    return torch.randint(0, 128, (LENGTHS[sample_id],), generator=generator)


def hf_labels(sample_id):
    """HF-style labels: aligned with the tokens, -100 on the prompt."""
    labels = tokens(sample_id).clone()
    labels[:PROMPT.get(sample_id, 0)] = -100
    return labels


def fetch(sample_id):
    return dcp_torch.causal_lm_sample(tokens(sample_id), hf_labels(sample_id))


def fetch_without_loss_mask(sample_id):
    sample = fetch(sample_id)
    del sample["loss_mask"]
    return sample


def reference_grads():
    """Each sequence alone through stock HF (SDPA), next-token cross entropy
    in fp64, summed over the tokens with a target, over their count. The
    loss is scaled before backward() (as dcp_torch's step.loss_scale is):
    HF's RMSNorm rounds its gradients to fp32, so scaling them after would
    differ by fp32 rounding (1e-7), not by what dcp_torch computes."""
    model = build("sdpa")
    scale = 1.0 / sum(int((hf_labels(i)[1:] != -100).sum()) for i in ALL)
    for sample_id in ALL:
        logits = model(input_ids=tokens(sample_id)[None]).logits[0]
        target = hf_labels(sample_id)[1:]
        (F.cross_entropy(logits[:-1], target, ignore_index=-100,
                         reduction="sum") * scale).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def start(rank, world_size, plans, model, blocks, name):
    return dcp_torch.init(model, blocks, spec=SPEC,
                          worker_id=f"{name}-rank{rank}", profile=False,
                          client=FakePlannerClient(SPEC, world_size, plans),
                          log=lambda message: None)


def forward_loss(model, mb):
    logits = model(input_ids=mb.inputs["input_ids"][None],
                   position_ids=mb.inputs["position_ids"][None]).logits
    return dcp_torch.causal_lm_loss(logits, mb.inputs["labels"], mb)


def train(rank, world_size):
    model = build()
    prepared = dcp_torch.prepare_hf_model(model)
    runtime = start(rank, world_size, PLANS, model, prepared.blocks, "hf")
    grads, shapes = [], []
    try:
        for step in runtime.steps([list(zip(ALL, LENGTHS))] * len(PLANS),
                                  fetch):
            for mb in step:
                with mb:
                    (forward_loss(model, mb) * step.loss_scale).backward()
            step.sync_gradients()
            step.report()
            grads.append({n: p.grad.clone()
                          for n, p in model.named_parameters()})
            shapes.append([(g.sp_size, len(g.micro_batches))
                           for g in step.plan.groups])
            model.zero_grad(set_to_none=True)
    finally:
        runtime.close()
    return grads, shapes, model.config._attn_implementation


def _mistaken_forward(model, mb, mistake):
    # [1, T], as stock HF takes them (prepare_hf_model's check also takes [T]).
    ids, pos = mb.inputs["input_ids"][None], mb.inputs["position_ids"][None]
    logits = None
    if mistake == "use_cache_argument":
        logits = model(input_ids=ids, position_ids=pos, use_cache=True).logits
    if mistake in ("no_position_ids", "no_position_ids_unchecked"):
        logits = model(input_ids=ids).logits
    if mistake == "arange_position_ids":
        logits = model(input_ids=ids,
                       position_ids=torch.arange(ids.shape[1])[None]).logits
    if logits is not None:
        return dcp_torch.causal_lm_loss(logits, mb.inputs["labels"], mb)
    if mistake in ("hf_loss", "hf_loss_unchecked"):
        # HF's way: labels aligned with input_ids (HF shifts them) and the
        # count of the batch's label tokens.
        labels = torch.cat([ids[0, :1], mb.inputs["labels"][:-1]])[None]
        out = model(input_ids=ids, position_ids=pos, labels=labels,
                    num_items_in_batch=torch.tensor(mb.step.loss_tokens))
        return out.loss / mb.step.loss_scale  # backward() of out.loss
    return None


def mistake(rank, world_size, which):
    """One SP 2 step (with recompute) with one mistake; the error raised (its
    type and message) or, where the checks are off, the gradients."""
    model = build()
    runtime = None
    try:
        prepared = None
        if which != "not_prepared":
            prepared = dcp_torch.prepare_hf_model(model)
        if which == "config_use_cache":
            model.config.use_cache = True  # HF's default, set back
        if which in ("sdpa_again", "sdpa_unchecked"):
            model.set_attn_implementation("sdpa")
        blocks = prepared.blocks if prepared else list(model.model.layers)
        runtime = start(rank, world_size, MISTAKE_PLAN, model, blocks,
                        f"mistake-{which}")
        if which.endswith("_unchecked"):
            prepared.remove()  # the forward checks off (after init's)
        fetcher = fetch_without_loss_mask if which == "no_loss_mask" \
            else fetch
        for step in runtime.steps([list(zip(ALL, LENGTHS))], fetcher):
            for mb in step:
                with mb:
                    loss = _mistaken_forward(model, mb, which)
                    if loss is None:
                        loss = forward_loss(model, mb)
                    (loss * step.loss_scale).backward()
            step.sync_gradients()
    except (hf.TransformersSetupError, dcp_torch.IgnoredLabelsError) as error:
        return type(error).__name__, str(error)
    finally:
        if runtime is not None:
            runtime.close()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def ranks2():
    pool = dist_util.RankPool(2)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def expected():
    return reference_grads()


def test_three_plans_give_the_per_sequence_reference_gradients(ranks2,
                                                               expected):
    results = ranks2.run(train)
    worst = 0.0
    for rank, (grads, shapes, implementation) in enumerate(results):
        assert implementation == "dcp"
        assert shapes == [[(1, 2), (1, 1)], [(2, 1)], [(2, 3)]], shapes
        for number, step_grads in enumerate(grads):
            assert set(step_grads) == set(expected)
            for name, grad in expected.items():
                torch.testing.assert_close(
                    step_grads[name], grad, rtol=1e-9, atol=1e-12,
                    msg=f"rank {rank} plan {number} {name}")
                worst = max(worst, ((step_grads[name] - grad).abs().max()
                                    / grad.abs().max()).item())
    print(f"max |grad - reference| / max |reference| = {worst:.1e}")


def _differs(grads, expected):
    return any(not torch.allclose(grads[n], g, rtol=1e-6, atol=1e-9)
               for n, g in expected.items())


# (mistake, error type, words the message must contain)
ERRORS = [
    # (a) the KV cache: HF's default config, or use_cache=True in the call.
    ("config_use_cache", "TransformersSetupError", "use_cache = False"),
    ("use_cache_argument", "TransformersSetupError", "use_cache = False"),
    # (b) position_ids: missing, or HF's default numbering (which rank 0's
    # half of sequence 3 matches: both ranks must still raise).
    ("no_position_ids", "TransformersSetupError",
     "position_ids=mb.inputs['position_ids']"),
    ("arange_position_ids", "TransformersSetupError",
     "position_ids=mb.inputs['position_ids']"),
    # (c) attention not routed: never prepared, or switched back.
    ("not_prepared", "TransformersSetupError", "prepare_hf_model(model)"),
    ("sdpa_again", "TransformersSetupError", "set_attn_implementation('dcp')"),
    # (d) -100 labels without a loss mask.
    ("no_loss_mask", "IgnoredLabelsError", "\"loss_mask\": labels != -100"),
    # (e) HF's own loss with num_items_in_batch.
    ("hf_loss", "TransformersSetupError", "dcp_torch.causal_lm_loss(logits"),
]


@pytest.mark.parametrize("which,kind,fix", ERRORS, ids=[e[0] for e in ERRORS])
def test_each_mistake_is_an_error_naming_the_fix(ranks2, which, kind, fix):
    for rank, result in enumerate(ranks2.run(mistake, which)):
        assert isinstance(result, tuple), f"rank {rank}: no error"
        assert result[0] == kind, (rank, result)
        assert fix in result[1], (rank, result[1])


@pytest.mark.parametrize("which", ["no_position_ids_unchecked",
                                   "sdpa_unchecked", "hf_loss_unchecked"])
def test_without_the_checks_the_mistakes_give_wrong_gradients(ranks2,
                                                              expected, which):
    for rank, grads in enumerate(ranks2.run(mistake, which)):
        assert isinstance(grads, dict), (rank, grads)
        assert _differs(grads, expected), f"rank {rank}: {which} was right"


# --- single process ---------------------------------------------------------


def test_a_model_whose_layers_do_not_call_the_dcp_attention_is_refused():
    model = build()
    dcp_torch.prepare_hf_model(model)
    registry = transformers.AttentionInterface._global_mapping
    registry["dcp"] = registry["sdpa"]  # the layers no longer reach dcp_torch
    try:
        with dcp_torch.packed(LENGTHS[:2]), \
                pytest.raises(hf.TransformersSetupError, match="no layer"):
            model(input_ids=torch.cat([tokens(0), tokens(1)]),
                  position_ids=torch.cat([torch.arange(5), torch.arange(9)]))
    finally:
        registry["dcp"] = hf.dcp_attention_forward
    with dcp_torch.packed(LENGTHS[:2]):  # registered again: fine
        model(input_ids=torch.cat([tokens(0), tokens(1)]),
              position_ids=torch.cat([torch.arange(5), torch.arange(9)]))


def test_causal_lm_sample_shifts_within_the_sequence_and_masks():
    sample = dcp_torch.causal_lm_sample(tokens(1), hf_labels(1))
    assert torch.equal(sample["input_ids"], tokens(1))
    assert torch.equal(sample["labels"][:-1], hf_labels(1)[1:])
    assert sample["labels"][-1] == -100
    assert torch.equal(sample["loss_mask"], sample["labels"] != -100)
    assert int(sample["loss_mask"].sum()) == LENGTHS[1] - PROMPT[1]


class _FakeMicroBatch:
    def __init__(self, input_ids):
        self.inputs = {"input_ids": input_ids}
        self.token_weight = torch.ones(len(input_ids), dtype=torch.float64)

    def token_loss_sum(self, per_token):
        return (per_token * self.token_weight).sum()


def test_causal_lm_loss_refuses_counted_ignored_and_unshifted_labels():
    ids = tokens(3)
    logits = torch.randn(1, len(ids), 128, dtype=torch.float64)
    mb = _FakeMicroBatch(ids)
    labels = torch.cat([ids[1:], ids[:1]])
    expected = F.cross_entropy(logits[0], labels, reduction="sum")
    torch.testing.assert_close(dcp_torch.causal_lm_loss(logits, labels, mb),
                               expected)
    labels[0] = -100
    with pytest.raises(dcp_torch.IgnoredLabelsError, match="loss_mask"):
        dcp_torch.causal_lm_loss(logits, labels, mb)
    mb.token_weight[0] = 0.0  # masked: fine
    dcp_torch.causal_lm_loss(logits, labels, mb)
    with pytest.raises(ValueError, match="unshifted"):
        dcp_torch.causal_lm_loss(logits, ids, mb)
