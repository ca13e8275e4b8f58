package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"elasticdl/internal/sqldb"
)

// dataSet is one of a job's data flags.
type dataSet struct {
	flag string
	uri  *string
}

// sqlDataSets are the data sets of cfg's job that are database tables or
// queries (sqlite://, postgres://, mysql://), which the master reads
// through a snapshot: those coreConfig counts.
func sqlDataSets(cfg *Config) []dataSet {
	var sets []dataSet
	if cfg.training() {
		sets = append(sets, dataSet{"training_data", &cfg.TrainingData})
	}
	if cfg.ValidationData != "" {
		sets = append(sets, dataSet{"validation_data", &cfg.ValidationData})
	}
	if cfg.Mode == ModePredict {
		sets = append(sets, dataSet{"prediction_data", &cfg.PredictionData})
	}
	out := sets[:0]
	for _, s := range sets {
		if sqldb.IsURI(*s.uri) {
			out = append(out, s)
		}
	}
	return out
}

// sqlPassword is the password the data sets' URIs hold, which the
// workers are given: one for all, or none.
func sqlPassword(sets []dataSet) (string, error) {
	var pw, from string
	for _, set := range sets {
		p := sqldb.Password(*set.uri)
		if p == "" {
			continue
		}
		if pw != "" && p != pw {
			return "", fmt.Errorf("--%s and --%s hold different passwords: workers take one, from %s (give it there, and none in the URIs)",
				from, set.flag, sqldb.EnvPassword)
		}
		pw, from = p, set.flag
	}
	return pw, nil
}

// sqlData is what the master keeps of the snapshots of its job's tables
// (docs/design-sql.md, decision 3). A snapshot's URI holds no password:
// it names tasks, and goes into the persisted state, logs and the
// dashboard. The master opens its snapshots with the password the user's
// URI held, and hands that to its workers in sqldb.EnvPassword.
type sqlData struct {
	// open maps a snapshot's URI to the one the master opens it with.
	open map[string]string
	// made are the snapshots this master copied (open's values): a start
	// that fails drops them; those a master before made stay its job's.
	made     []string
	password string
	keep     bool // --keep_snapshot: none is dropped
}

// prepareSQL makes, or finds made by a master before for the same run,
// the snapshot of each of cfg's data sets that is a table, and points cfg
// at them. On an error it drops those it made.
func prepareSQL(ctx context.Context, cfg *Config, log *slog.Logger) (*sqlData, error) {
	sets := sqlDataSets(cfg)
	password, err := sqlPassword(sets)
	if err != nil {
		return nil, err
	}
	sd := &sqlData{open: map[string]string{}, password: password, keep: cfg.KeepSnapshot}
	for _, set := range sets {
		pw := sqldb.Password(*set.uri)
		start := time.Now()
		snap, err := sqldb.PrepareSnapshot(ctx, *set.uri, cfg.RunID)
		if err != nil {
			sd.dropMade(log)
			return nil, fmt.Errorf("--%s: %w", set.flag, err)
		}
		opened := sqldb.WithPassword(snap.URI, pw)
		_, seen := sd.open[snap.URI] // training and validation data may be one table
		switch {
		case snap.Made:
			sd.made = append(sd.made, opened)
			log.Info("data snapshot made", "flag", set.flag, "snapshot", snap.URI, "took", time.Since(start).Round(time.Millisecond))
		case !seen:
			log.Info("data snapshot found, made by a master before", "flag", set.flag, "snapshot", snap.URI)
		}
		sd.open[snap.URI] = opened
		*set.uri = snap.URI
	}
	return sd, nil
}

// opened is the URI the master opens data set uri with. A nil sqlData
// (a master built by hand in a test) has no snapshots.
func (sd *sqlData) opened(uri string) string {
	if sd == nil {
		return uri
	}
	if o, ok := sd.open[uri]; ok {
		return o
	}
	return uri
}

// workerEnv is what a worker's environment needs to read the snapshots.
func (sd *sqlData) workerEnv() []string {
	if sd == nil || sd.password == "" {
		return nil
	}
	return []string{sqldb.EnvPassword + "=" + sd.password}
}

// dropMade drops the snapshots this master made: its start failed, and
// no persisted state names them.
func (sd *sqlData) dropMade(log *slog.Logger) {
	if sd == nil {
		return
	}
	sd.drop(sd.made, log)
	sd.made = nil
}

// dropAll drops every snapshot of the job, which has ended.
func (sd *sqlData) dropAll(log *slog.Logger) {
	if sd == nil {
		return
	}
	var all []string
	for _, o := range sd.open {
		all = append(all, o)
	}
	sd.drop(all, log)
	sd.open, sd.made = nil, nil
}

// drop drops the snapshots uris, or with --keep_snapshot logs their names.
func (sd *sqlData) drop(uris []string, log *slog.Logger) {
	if !sd.keep {
		drop(uris, log)
		return
	}
	for _, u := range uris {
		log.Info("data snapshot kept (--keep_snapshot): drop it by hand, or `elasticdl sql` drops it after --snapshot_max_age",
			"snapshot", sqldb.StripPassword(u))
	}
}

// snapshotRefresh is how often a running master records its snapshots as
// prepared: elasticdl sql's sweep drops only those not recorded for its
// --snapshot_max_age, so a live job's stay however long it runs.
const snapshotRefresh = time.Hour

// keepFresh records the job's snapshots as prepared every
// snapshotRefresh while ctx lasts.
func (sd *sqlData) keepFresh(ctx context.Context, log *slog.Logger) {
	sd.refresh(ctx, snapshotRefresh, sqldb.Touch, log)
}

// refresh records the job's snapshots as prepared (touch: sqldb.Touch)
// every interval until ctx ends.
func (sd *sqlData) refresh(ctx context.Context, every time.Duration, touch func(context.Context, string) error, log *slog.Logger) {
	if sd == nil || len(sd.open) == 0 {
		return
	}
	uris := slices.Collect(maps.Values(sd.open)) // the job's end clears open
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, u := range uris {
				if err := touch(ctx, u); err != nil && ctx.Err() == nil {
					log.Warn("recording a data snapshot as in use", "err", err)
				}
			}
		}
	}()
}

// dropTimeout bounds dropping a job's snapshots.
const dropTimeout = 30 * time.Second

func drop(uris []string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
	defer cancel()
	var errs []error
	for _, u := range uris {
		if err := sqldb.Drop(ctx, u); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("data snapshot dropped", "snapshot", sqldb.StripPassword(u))
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("dropping the data snapshots: drop them by hand", "err", err)
	}
}
