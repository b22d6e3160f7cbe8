"""The shop's API: `uvicorn fastapi_shop.main:api` from examples/fastapi_shop.

An order and its receipt's job are written in one transaction, and a worker runs in the same
process, started and stopped with the app."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from fastapi_shop.tasks import app, send_receipt
from tenure.contrib.asgi import running, transaction
from tenure.worker.options import WorkerOptions

CREATE_ORDERS = "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, email text NOT NULL)"
INSERT_ORDER = "INSERT INTO orders (email) VALUES (%s) RETURNING id"


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[dict[str, Any]]:
    async with running(app, worker=WorkerOptions(concurrency=4), migrate=True) as runtime:
        async with transaction(app) as conn:
            await conn.execute(CREATE_ORDERS)
        yield {"tenure": runtime}


api = FastAPI(lifespan=lifespan)


class OrderIn(BaseModel):
    email: str


@api.post("/orders", status_code=201)
async def place_order(order: OrderIn) -> dict[str, int]:
    async with transaction(app) as conn:
        row = await (await conn.execute(INSERT_ORDER, (order.email,))).fetchone()
        assert row is not None
        job = await send_receipt.with_options(conn=conn).enqueue(order_id=row[0], email=order.email)
        if order.email.endswith("@declined.example"):  # inside the block: the order and its job roll back
            raise HTTPException(status_code=402, detail=f"card declined for order {row[0]}")
    return {"order": row[0], "job": job.id}


@api.get("/jobs/{job_id}")
async def job_state(job_id: int) -> dict[str, Any]:
    job = await app.client.get_job(job_id)
    if job is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return {"id": job.id, "state": job.state.value, "result": job.result}
