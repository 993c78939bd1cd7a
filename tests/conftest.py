"""Settings shared by the whole suite."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny shapes run fastest and most stably on one thread: on a loaded 2-core CI box two threads were 10-100x
    slower. Code under test that needs another count sets it explicitly (and the config's `threads` key does)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
