"""rooflinesim: roofline and calibrated analytic performance models for LLM inference kernels.

The package import is kept light on purpose (no pydantic, sympy or plotly here): the
measurement harness must import with only PyTorch and the standard library present.
"""

__version__ = "0.1.0"
