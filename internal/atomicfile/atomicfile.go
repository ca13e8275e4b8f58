// Package atomicfile writes a file so that a crash — of the process or of
// the machine — leaves either its old content or the new one, never part
// of it: checkpoints, the job summary, a master's persisted state.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// TempSuffix marks the temporary files Write creates beside path, named
// "." + base(path) + TempSuffix + random: a crash can leave one behind, and
// whoever owns the directory may remove them.
const TempSuffix = ".tmp"

// Write replaces path with data: a temporary file in path's directory,
// fsync, rename over path, fsync of the directory (the rename is durable
// once the directory is). The directory must exist. On failure the
// temporary file is removed and path is unchanged.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+TempSuffix+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir makes dir's entries (a rename, a new file or directory) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
