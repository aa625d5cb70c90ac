"""Fuzz the API from its own OpenAPI spec (schemathesis): no input may produce a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from ptmlab.serve.app import create_app
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.state import open_store
from tests.test_serve_support import train_victim

KEY: list[str] = []


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    store = open_store(str(tmp_path_factory.mktemp("fuzz-home")))
    KEY.append(store.create_key("fuzz", rate=10_000, burst=10_000))
    app = create_app(str(train_victim()), ServeConfig(detector=False, max_texts=16, max_chars=200), store)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def test_no_input_gives_a_server_error(api_schema):
    for path, method in (("/v1/predict", "POST"), ("/healthz", "GET"), ("/metrics", "GET")):
        op = api_schema[path][method]

        @given(case=op.as_strategy())
        @settings(max_examples=60 if method == "POST" else 5, deadline=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            for headers in ({"Authorization": f"Bearer {KEY[0]}"}, {}):
                response = case.call(headers=headers)
                assert response.status_code < 500, (case.path, case.body, response.text[:300])
                if response.status_code >= 400:
                    assert "error" in response.json()

        check()
