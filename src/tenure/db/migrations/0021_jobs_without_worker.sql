-- 0021: what it takes to see jobs no live worker can run (docs/operations.md, "Jobs no worker
-- runs"): each worker's registry row lists the tasks it registered (NULL for a worker of an
-- earlier version, which counts as running every task of its queues). The statement that finds
-- them reads the oldest due jobs of each queue through the claim's own index, so no index is
-- added to jobs: every index there costs each enqueue and transition an entry.

ALTER TABLE __schema__.workers ADD COLUMN IF NOT EXISTS tasks text[];
