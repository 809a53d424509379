"""The split/reduce/broadcast pieces of ``scatter_allreduce``, and its shape trace."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from conftest import TINY, examples, run_script
from hypothesis import given

from multigpu.strategies.comm import (
    ALIGN_BYTES,
    FlatBuffer,
    FlatBuffers,
    gather,
    reduce_add,
    scatter,
    split_sizes,
)


@pytest.mark.parametrize("total,parts", [(30, 4), (32, 3), (16, 3), (3, 4), (1, 2), (257, 8)])
def test_even_split_covers_the_batch_and_differs_by_at_most_one(total, parts):
    sizes = split_sizes(total, parts)
    assert len(sizes) == parts and sum(sizes) == total
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("weights", [[0.6, 0.4], [3, 1, 0], [0.2, 0.3, 0.5]])
def test_weighted_split_follows_the_weights(weights):
    total = 1000
    sizes = split_sizes(total, len(weights), weights)
    assert sum(sizes) == total
    for size, weight in zip(sizes, weights, strict=True):
        assert abs(size - total * weight / sum(weights)) < 1


def test_scatter_gather_round_trip_keeps_gradients():
    x = torch.randn(10, 3, requires_grad=True)
    cpu = torch.device("cpu")
    shards = scatter(x, [4, 3, 3], [cpu, cpu, cpu])
    assert [len(s) for s in shards] == [4, 3, 3]
    y = gather([s * (i + 1) for i, s in enumerate(shards)], cpu)
    y.sum().backward()
    assert x.grad[:4].eq(1).all() and x.grad[4:7].eq(2).all() and x.grad[7:].eq(3).all()


def test_flat_buffer_packs_and_adopts():
    tensors = [torch.randn(3, 2), torch.randn(5), torch.randn(())]
    buffer = FlatBuffer(tensors)
    buffer.pack(tensors)
    assert all(torch.equal(v, t) for v, t in zip(buffer.views, tensors, strict=True))
    # Adopted tensors keep their value, then follow every write to the buffer.
    adopted = [t.clone() for t in tensors]
    buffer.adopt(adopted)
    assert all(torch.equal(a, b) for a, b in zip(adopted, tensors, strict=True))
    buffer.flat.mul_(2)
    assert all(torch.equal(a, 2 * b) for a, b in zip(adopted, tensors, strict=True))
    with pytest.raises(ValueError, match="one dtype"):
        FlatBuffer([torch.zeros(2), torch.zeros(2, dtype=torch.int64)])


@examples(100)
@given(
    shapes=st.lists(st.lists(st.integers(0, 9), max_size=4), min_size=1, max_size=8),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64, torch.int64]),
)
def test_every_view_of_a_flat_buffer_starts_aligned_and_the_gaps_stay_zero(shapes, dtype):
    """Each tensor starts on the allocator's boundary, as a tensor of its own would (kernels
    read a misaligned fp32 parameter wrongly on a GPU), and holds its own values only."""
    tensors = [torch.arange(1, 1 + math.prod(s)).reshape(s).to(dtype) for s in shapes]
    buffer = FlatBuffer(tensors)
    buffer.pack(tensors)
    base = buffer.flat.data_ptr()
    assert all((v.data_ptr() - base) % ALIGN_BYTES == 0 for v in buffer.views if v.numel())
    assert all(torch.equal(v, t) for v, t in zip(buffer.views, tensors, strict=True))
    in_views = sum(int(t.to(torch.float64).sum()) for t in tensors)
    assert int(buffer.flat.to(torch.float64).sum()) == in_views  # nothing else written


def test_flat_buffers_copy_mixed_dtypes_between_owners():
    source = [torch.randn(4), torch.tensor(7), torch.randn(2, 2)]
    target = [torch.zeros(4), torch.tensor(0), torch.zeros(2, 2)]
    sending, receiving = FlatBuffers(source), FlatBuffers(target)
    receiving.adopt(target)
    sending.pack(source)
    receiving.copy_(sending)
    assert all(torch.equal(a, b) for a, b in zip(target, source, strict=True))
    assert target[1].dtype == torch.int64


def test_reduce_add_sums_in_place_through_staging():
    flats = [torch.randn(6) for _ in range(3)]
    total = flats[0].clone()
    staging = [None, torch.empty(6)]
    result = reduce_add(total, flats[1:], staging)
    assert result is total
    torch.testing.assert_close(total, flats[0] + flats[1] + flats[2])
    assert torch.equal(staging[1], flats[2])  # what crossed "devices" went through staging


@pytest.mark.slow
@pytest.mark.subprocess
def test_trace_shapes_shows_the_scatter(tmp_path):
    result = run_script(
        "train.py",
        *TINY,
        "data=synthetic",
        "data.num_train=30",
        "data.batch_size=30",
        "+trainer.max_steps=1",
        "strategy=scatter_allreduce",
        "trainer.devices=4",
        "strategy.trace_shapes=true",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text = result.stdout + result.stderr
    for i, size in enumerate([8, 8, 7, 7]):
        assert f"replica {i} on cpu: input ({size}, 1, 28, 28), output ({size}, 10)" in text
    assert "gathered on cpu: (30, 10)" in text
