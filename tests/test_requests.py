"""Many request batches priced as one array (``predict_requests``) give each the times
``predict_model`` gives it alone: chunked or not, pipelined or not, dense or MoE."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.models.workload import predict_model, predict_requests

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
CASES = {
    "llama-3.1-8b": ("llama-3.1-8b", Deployment()),
    "mixtral tp2 fp8": ("mixtral-8x7b", Deployment(tp=2, weights="fp8")),
    "llama-3-70b tp2 pp2": ("llama-3-70b", Deployment(tp=2, pp=2)),
    "llama-3.1-8b eager": ("llama-3.1-8b", Deployment(eager=True)),
}
REL = 1e-9  # (two code paths: rounding apart, never bit for bit)

requests = st.lists(st.tuples(st.integers(1, 96), st.integers(1, 6000), st.integers(1, 700)), min_size=1, max_size=6)


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(sorted(CASES)), reqs=requests, chunk=st.sampled_from([None, 64, 512, 2048]),
       points=st.integers(1, 5))
def test_each_request_is_priced_as_alone(case, reqs, chunk, points):
    name, d = CASES[case]
    model = load_config(name)
    batch, prompt, gen = (np.array(x) for x in zip(*reqs))
    got = predict_requests(model, H200, FITTED, d, batch=batch, prompt=prompt, gen=gen, chunk=chunk,
                           decode_points=points)
    for i, (b, p, g) in enumerate(reqs):
        one = predict_model(model, H200, FITTED, d, batch=b, prompt=p, gen=g, chunk=chunk, decode_points=points)
        assert got.ttft_s[i] == pytest.approx(one.ttft_s, rel=REL)
        assert got.tpot_s[i] == pytest.approx(one.tpot_s, rel=REL)
        assert got.e2e_s[i] == pytest.approx(one.e2e_s, rel=REL)


def test_arrays_broadcast_and_times_grow_with_the_prompt():
    got = predict_requests("llama-3.1-8b", H200, FITTED, batch=8, prompt=[128, 1024, 8192], gen=64)
    assert got.ttft_s.shape == (3,)
    assert np.all(np.diff(got.ttft_s) > 0) and np.all(np.diff(got.tpot_s) > 0)
    assert set(got.as_dict()) == {"ttft_s", "tpot_s", "e2e_s"}


@pytest.mark.parametrize("bad", [[0], [1.5], [np.nan], [], [True], ["x"]])
def test_bad_requests_are_one_sentence(bad):
    with pytest.raises(UserError, match="whole numbers of at least 1"):
        predict_requests("llama-3.1-8b", H200, FITTED, batch=bad, prompt=128, gen=8)
