"""How a micro-batch's samples become one rank's inputs (no processes)."""

import types

import pytest
import torch

from dcp_torch._proto import plan_pb2
from dcp_torch.micro_batch import MicroBatch

STEP = types.SimpleNamespace(_runtime=types.SimpleNamespace(
    device=torch.device("cpu"), _synchronize=None))
LENGTHS = {7: 3, 8: 4}  # 7 tokens over SP 3: chunks of 3, 2 tokens padding


def fetch(sample_id):
    length = LENGTHS[sample_id]
    return {"input_ids": torch.arange(length) + 10 * sample_id,
            "loss_mask": torch.tensor([1] * (length - 1) + [0]),
            "t": torch.tensor(float(sample_id))}


def micro_batch(position, sp_size=3, fetch=fetch):
    proto = plan_pb2.MicroBatch(sequence_indices=[0, 1],
                                checkpointed_layers=1)
    return MicroBatch(STEP, 0, proto, [(7, 3), (8, 4)], fetch,
                      frozenset(), sp_size, position, group=None)


def test_each_member_gets_its_chunk_of_the_packed_padded_stream():
    members = [micro_batch(p) for p in range(3)]
    ids = torch.cat([m.inputs["input_ids"] for m in members])
    assert ids.tolist() == [70, 71, 72, 80, 81, 82, 83, 0, 0]
    positions = torch.cat([m.inputs["position_ids"] for m in members])
    assert positions.tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 0]
    sequences = torch.cat([m.inputs["sequence_index"] for m in members])
    assert sequences.tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0]
    for m in members:  # per-sequence values, stacked, on every member
        assert m.inputs["t"].tolist() == [7.0, 8.0]
        assert m.packing.cu_seqlens == [0, 3, 7, 9] and m.packing.padded
        assert m.checkpointed_layers == 1
    # loss_mask and padding decide which tokens count: 2 + 3 of 7.
    weights = torch.cat([m.token_weight for m in members])
    assert weights.tolist() == [1, 1, 0, 1, 1, 1, 0, 0, 0]
    assert sum(m.loss_tokens for m in members) == 5
    per_token = torch.arange(3, dtype=torch.float64) + 1
    assert members[0].token_loss_sum(per_token).item() == 3.0  # 1 + 2


def test_no_padding_when_the_sp_size_divides_the_tokens():
    m = micro_batch(0, sp_size=1)
    assert m.packing.cu_seqlens == [0, 3, 7] and not m.packing.padded


def test_a_token_tensor_of_the_wrong_length_names_the_sample_and_key():
    def short(sample_id):
        sample = fetch(sample_id)
        if sample_id == 8:
            sample["input_ids"] = sample["input_ids"][:2]
            sample["loss_mask"] = sample["loss_mask"][:2]
        return sample
    with pytest.raises(ValueError, match=r"fetch\(8\)\['input_ids'\] has 2 "
                                         "rows but the sampler gave the "
                                         "sample 4 tokens"):
        micro_batch(0, fetch=short)


def test_fetch_returning_lists_is_told_what_it_returned_and_what_is_expected():
    def lists(sample_id):
        return {key: value.tolist() for key, value in fetch(sample_id).items()}
    with pytest.raises(TypeError) as error:
        micro_batch(0, fetch=lists)
    assert str(error.value).startswith(
        "fetch(7)['input_ids'] is a list of 3 items, not a torch.Tensor; "
        "fetch must return torch tensors")
    assert "return torch.tensor(...) for 'input_ids'" in str(error.value)
    with pytest.raises(TypeError, match=r"fetch\(7\) returned a list of 2 "
                                        "items; fetch must return a dict of "
                                        "torch tensors"):
        micro_batch(0, fetch=lambda i: [fetch(i)["input_ids"],
                                        fetch(i)["loss_mask"]])


def test_per_sequence_numbers_are_still_accepted():
    def numbers(sample_id):
        sample = fetch(sample_id)
        sample["t"] = float(sample_id)  # a plain number: per-sequence
        return sample
    assert micro_batch(0, fetch=numbers).inputs["t"].tolist() == [7.0, 8.0]
