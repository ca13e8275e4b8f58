package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"elasticdl/internal/cluster"
)

// WriteTLS writes spec's TLS bundle into dir/<instance name> (0700, each
// file 0600: only this user reads the key) and returns spec with the
// directory named in its environment and the bundle dropped.
func WriteTLS(dir string, spec cluster.InstanceSpec) (cluster.InstanceSpec, error) {
	if spec.TLS == nil {
		return spec, nil
	}
	if dir == "" {
		return spec, errors.New("an instance with TLS credentials, and no directory to put them in")
	}
	d := filepath.Join(dir, spec.Name())
	if err := spec.TLS.Write(d); err != nil {
		return spec, fmt.Errorf("credentials of %s: %w", spec.Name(), err)
	}
	spec.Env = append(append([]string(nil), spec.Env...), cluster.EnvTLSDir+"="+d)
	spec.TLS = nil
	return spec, nil
}

// RemoveTLS removes the bundle WriteTLS wrote into dir for an instance
// that has exited: its key is of no use to anyone after it (a relaunch
// gets a new ID and certificate). dir "" (no TLS) does nothing.
func RemoveTLS(dir string, role cluster.Role, id int) error {
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(dir, cluster.InstanceName(role, id))); err != nil {
		return fmt.Errorf("credentials of %s: %w", cluster.InstanceName(role, id), err)
	}
	return nil
}
