package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/tlsid"
)

// openWarning is what a process of a job run with --tls=false says, once,
// loudly: nothing it serves checks who calls.
const openWarning = "TLS IS OFF (--tls=false): this job's ports are open to anyone who reaches them, who can read and change its model and forge its workers' reports; use it for debugging only"

// localCADir is where a local job keeps its CA and its instances'
// credentials.
func localCADir(output string) string { return filepath.Join(output, "tls") }

// makeLocalCA creates the job's CA under OUTPUT/tls (0700, files 0600) at
// submission, and returns the directory, "" with --tls=false. A master
// restarted after a failure reloads it from there.
func makeLocalCA(job, output string, o jobOptions) (string, error) {
	if !o.tls {
		return "", nil
	}
	now := time.Now()
	ca, err := tlsid.NewCA(job, now, now.Add(o.tlsValidity))
	if err != nil {
		return "", err
	}
	dir := localCADir(output)
	// Credentials of an earlier run of this output directory are stale.
	if err := os.RemoveAll(filepath.Join(dir, "instances")); err != nil {
		return "", fmt.Errorf("job CA: %w", err)
	}
	if err := ca.Save(dir); err != nil {
		return "", fmt.Errorf("job CA: %w", err)
	}
	return dir, nil
}

// loadJobCA is the master's view of the job's CA: nil with --tls=false
// (said loudly), else the one in --tls_ca_dir.
func loadJobCA(o jobOptions, l localMasterOptions, job string, logger *slog.Logger) (*tlsid.CA, error) {
	if !o.tls {
		logger.Warn(openWarning)
		return nil, nil
	}
	if l.caDir == "" {
		return nil, usageError{errors.New("--tls needs --tls_ca_dir, the job's CA (`elasticdl train` makes it), or --tls=false")}
	}
	ca, err := tlsid.LoadCA(l.caDir, job)
	if err != nil {
		return nil, fmt.Errorf("--tls_ca_dir=%s: %w", l.caDir, err)
	}
	return ca, nil
}

// roleCreds are a worker's or PS's credentials, from the directory its
// backend named in $ELASTICDL_TLS_DIR; none (said loudly) when unset.
func roleCreds(logger *slog.Logger) (*tlsid.Creds, error) {
	dir := os.Getenv(cluster.EnvTLSDir)
	if dir == "" {
		logger.Warn(openWarning)
		return nil, nil
	}
	c, err := tlsid.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", cluster.EnvTLSDir, err)
	}
	return c, nil
}
