"""Tensors of a signature's fixed shapes come from one-element stand-ins (``variant.allocation``): ``new_from``
gives a new contiguous tensor of the shape, dtype and device stood for, never the stand-in's storage."""
import pytest
import torch

from portattn.kernels.variant import allocation, new_from


@pytest.mark.parametrize("shape", [(7,), (2, 3, 5), (1, 8, 64, 64), (2, 1, 3, 1), (0, 4), (3, 0, 2, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_new_from_gives_fresh_contiguous_tensors(shape, dtype):
    stand_in = allocation(shape, dtype, torch.device("cpu"))
    a, b = new_from(stand_in), new_from(stand_in)
    assert a.shape == shape and a.dtype == dtype and a.device.type == "cpu" and a.is_contiguous()
    assert a.stride() == torch.empty(shape).stride()
    if a.numel():
        assert a.data_ptr() != b.data_ptr() and a.data_ptr() != stand_in.data_ptr()
        a.fill_(1)
        b.fill_(2)
        assert bool((a == 1).all()) and stand_in.untyped_storage().nbytes() == dtype.itemsize
