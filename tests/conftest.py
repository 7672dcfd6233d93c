from __future__ import annotations

import pytest
from loguru import logger


@pytest.fixture
def caplog_loguru():
    """Loguru records emitted during the test, as dicts with level and message."""
    records: list[dict] = []
    handler = logger.add(lambda message: records.append({"level": message.record["level"].name, "message": message.record["message"]}), level="DEBUG")
    yield records
    logger.remove(handler)
