package roleflags

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SplitCommand splits a --worker_command into its argv the way a POSIX
// shell splits words: on blanks, with 'single' and "double" quotes and
// backslash escapes, and nothing else (no variables, globs, pipes or
// redirections: for those, run `sh -c '...'` as the command). The program
// is then the worker process itself, so that signals and the exit code the
// master sees are its own.
func SplitCommand(s string) ([]string, error) {
	var (
		args  []string
		word  strings.Builder
		in    bool // a word has started (quotes may make an empty one)
		quote rune
	)
	runes := []rune(s)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(runes) && strings.ContainsRune(`"\$`+"`", runes[i+1]):
				i++
				word.WriteRune(runes[i])
			default:
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\':
			if i+1 == len(runes) {
				return nil, errors.New("ends with a lone backslash")
			}
			i++
			word.WriteRune(runes[i])
			in = true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				args = append(args, word.String())
				word.Reset()
				in = false
			}
		default:
			word.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if in {
		args = append(args, word.String())
	}
	if len(args) == 0 {
		return nil, errors.New("empty: give the program to run, e.g. \"python3 train.py\"")
	}
	return args, nil
}

// The environment a --worker_command process is started with: how a
// worker written in another language (the Python SDK, python/elasticdl)
// finds its job. Documented in docs/worker-api.md.
const (
	EnvMasterAddr    = "ELASTICDL_MASTER_ADDR"
	EnvWorkerID      = "ELASTICDL_WORKER_ID"
	EnvPSAddrs       = "ELASTICDL_PS_ADDRS" // comma-separated, in shard order
	EnvMinibatchSize = "ELASTICDL_MINIBATCH_SIZE"
	EnvSeed          = "ELASTICDL_SEED"
	EnvOptimizer     = "ELASTICDL_OPTIMIZER"
	EnvModelParams   = "ELASTICDL_MODEL_PARAMS"
	EnvJobName       = "ELASTICDL_JOB_NAME"
	EnvUseAsync      = "ELASTICDL_USE_ASYNC"
	// AllreduceStrategy: the strategy, where the worker's ring helper
	// listens for its peers, and the records of one step across the ring.
	EnvStrategy       = "ELASTICDL_STRATEGY"
	EnvCollectiveAddr = "ELASTICDL_COLLECTIVE_ADDR"
	EnvGlobalBatch    = "ELASTICDL_GLOBAL_BATCH_SIZE"
)

// CommandEnv renders w as the environment of a --worker_command process
// (KEY=VALUE), with the job's name, optimizer and SGD mode.
func (w Worker) CommandEnv(jobName, optimizer string, useAsync bool) []string {
	return []string{
		EnvMasterAddr + "=" + w.MasterAddr,
		EnvWorkerID + "=" + strconv.Itoa(w.WorkerID),
		EnvPSAddrs + "=" + strings.Join(w.PSAddrs, ","),
		EnvMinibatchSize + "=" + strconv.Itoa(w.MinibatchSize),
		EnvSeed + "=" + strconv.FormatInt(w.Seed, 10),
		EnvOptimizer + "=" + optimizer,
		EnvModelParams + "=" + w.ModelParams,
		EnvJobName + "=" + jobName,
		EnvUseAsync + "=" + strconv.FormatBool(useAsync),
		EnvStrategy + "=" + w.DistributionStrategy,
		EnvCollectiveAddr + "=" + w.CollectiveAddr,
		EnvGlobalBatch + "=" + strconv.Itoa(w.GlobalBatchSize),
	}
}
