// Package ps is the parameter server: one process per shard, holding the
// dense parameters that shard.Of assigns to it, serving them to workers
// (PullDenseParameters) and applying the gradients workers push
// (PushGradients) with an optimizer.
//
// A shard starts empty; the first PushModel initializes it and later ones
// are ignored, so every worker can push its freshly built model at start
// without coordination. A relaunched PS starts empty again and is
// re-initialized by whichever worker talks to it first (see package
// ps/client) — unless it has checkpoints.
//
// # Checkpoints
//
// With Config.CheckpointSteps > 0 a shard snapshots its parameters and
// optimizer slots each time its version reaches a multiple of it and a
// background goroutine writes the snapshot (package ps/checkpoint), one
// write at a time; a failed write is logged and counted, never fatal. A
// shard started with Config.CheckpointDir holding a complete version
// restores the newest one before serving (re-sharding when it was written
// by another number of PS) and is initialized from the start: workers'
// PushModel is ignored and no worker needs to re-initialize it.
//
// Training is asynchronous SGD: each push is applied as it arrives, however
// stale. Each parameter has its own lock, so concurrent pushes touching
// different parameters proceed in parallel while no update is ever torn.
// A pull may see one push applied to some parameters and not yet to others.
//
// # Sparse embedding tables
//
// PushModel may also register embedding tables (name, dim, initializer).
// Row id of every table lives on shard id mod numPS (EmbeddingShardOf,
// ElasticDL's rule); each shard creates a row the first time it is pulled
// (PullEmbeddingVectors) or pushed, from the table's initializer with a
// generator seeded by (table name, id) alone, so any PS — and a PS
// relaunched without checkpoints — creates the same initial row.
// PushGradients carries IndexedSlices per table; duplicate ids are summed,
// then each row is updated by the optimizer's row-wise rule
// (optimizer.RowOptimizer) with per-row slots and step count kept beside
// the row. Rows absent from a push are not touched ("lazy" Adam). Unknown
// tables, wrong dims, ids/values length mismatches, negative ids and ids
// of another shard reject the whole push (InvalidArgument) before anything
// is applied. Rows are stored in 64 lock stripes per table, each a map
// id -> row index (no pointers) over 4096-row []float32 slabs holding the
// value and slots of each row contiguously; no dense gradient of a table
// exists anywhere. Checkpoints include the tables (ids, rows, steps,
// slots) and re-shard them by id mod numPS on restore.
package ps
