"""What a running handler sees: its `JobContext`, effects, `ctx.atomic` and the transaction
runner. It reaches its worker only through `JobServices`."""
