import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, derandomize=True, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=60)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
