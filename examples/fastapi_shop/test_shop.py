"""The shop's tests: `pytest test_shop.py` from examples/fastapi_shop, with $TENURE_DSN set.
Starlette's TestClient, used as a context manager, runs the lifespan: the in-process worker runs
what the endpoints enqueue."""

import time

from fastapi.testclient import TestClient
from fastapi_shop.main import api


def test_order_gets_its_receipt() -> None:
    """An order placed through the API has its receipt's job run by the in-process worker."""
    with TestClient(api) as client:
        placed = client.post("/orders", json={"email": "a@example.com"}).json()
        deadline = time.monotonic() + 30
        while (job := client.get(f"/jobs/{placed['job']}").json())["state"] != "succeeded":
            assert time.monotonic() < deadline, job
            time.sleep(0.1)
    assert job["result"] == f"receipt for order {placed['order']} sent to a@example.com"


def test_declined_order_is_a_402() -> None:
    """An order the endpoint declines inside its transaction is answered 402."""
    with TestClient(api) as client:
        response = client.post("/orders", json={"email": "b@declined.example"})
    assert response.status_code == 402, response.text
