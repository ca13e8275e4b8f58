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
package ps
