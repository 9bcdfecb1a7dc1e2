import pytest

# The mock Kafka broker fixture, for every test module that names it.
from kafka_mock import mock_kafka  # noqa: F401


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the test item, so fixtures can tell whether the test failed.
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
