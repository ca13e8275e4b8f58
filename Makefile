# Entry points for people; CI runs hack/test.sh through `make test`.
TAGS ?= $(shell hack/blas-tags.sh)
# Where `make k8s-up` keeps its rig (hack/k8s-rig/lib.sh's default).
K8S_RIG_STATE ?= $(or $(TMPDIR),/tmp)/elasticdl-k8s
export K8S_RIG_STATE

.PHONY: build static train test bench proto docs dashboard-shots e2e experiments k8s-up k8s-down db-up db-down s3-up s3-down
build:
	go build -buildvcs=auto -tags "$(TAGS)" -o bin/elasticdl ./cmd/elasticdl

# A static, cgo-free binary (pure-Go BLAS): it runs in any Linux image with
# nothing installed. bin/elasticdl (OpenBLAS when installed) computes faster.
static:
	CGO_ENABLED=0 go build -buildvcs=auto -trimpath -ldflags=-s -o bin/elasticdl-static ./cmd/elasticdl

train:
	hack/train.sh

test:
	hack/test.sh

bench:
	bench/run.sh

proto:
	proto/gen.sh

# docs/cli.md, generated from the flags (TestCLIReference checks it).
docs:
	ELASTICDL_UPDATE_DOCS=1 go test ./cli -run TestCLIReference -count=1

# docs/images/job.png and cluster.png: the dashboard's pages drawn from fake
# documents in headless Chromium (TestJobPage, TestClusterPage).
dashboard-shots:
	ELASTICDL_UPDATE_SHOTS=1 ELASTICDL_REQUIRE_BROWSER=1 go test ./internal/dashboard -run 'TestJobPage|TestClusterPage' -count=1

# The Kubernetes e2e suite alone (it starts and stops a rig of its own).
e2e:
	hack/e2e.sh

# The seeds' experiments, full versions (docs/experiments.md); one or some
# with EXPERIMENTS=gang,...
EXPERIMENTS ?= all
experiments:
	hack/experiments.sh $(EXPERIMENTS)

# A test control plane for people (hack/k8s-rig/README.md): 2 process nodes
# whose pods of image elasticdl[:any tag] run bin/elasticdl, the PriorityClasses,
# and deploy/rbac.yaml in namespace default. Prints the KUBECONFIG line. The
# rig has no cluster DNS: its jobs name the master's and the PS's host
# (--master_host, --ps_host; TestK8sMasterUnreachable shows what happens
# without).
k8s-up: build
	@hack/deps.sh
	@hack/k8s-rig/build.sh >/dev/null
	@set -e; out=$$(hack/k8s-rig/up.sh); kc=$${out#export KUBECONFIG=}; \
	  kubectl="$$(cat "$(K8S_RIG_STATE)/bin-dir")/kubectl --kubeconfig $$kc"; \
	  $$kubectl apply -f deploy/priority-classes.yaml; \
	  $$kubectl apply -n default -f deploy/rbac.yaml; \
	  K8S_RIG_PROCNODE_IMAGE_MAP=elasticdl=$(CURDIR)/bin/elasticdl hack/k8s-rig/procnodes.sh 2 4 8Gi; \
	  echo; \
	  echo "# the rig is up; kubectl is $$(cat "$(K8S_RIG_STATE)/bin-dir")/kubectl. Then for example:"; \
	  echo "#   bin/elasticdl train --backend=k8s --image=elasticdl --master_host=127.0.0.1 --ps_host=127.0.0.1 \\"; \
	  echo "#     --model_def=fashion_mnist.mlp \\"; \
	  echo "#     --training_data=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz --output=$$PWD/out/k8s"; \
	  echo "export KUBECONFIG=$$kc"

k8s-down:
	hack/k8s-rig/down.sh

# PostgreSQL and MariaDB on free ports of 127.0.0.1, for the SQL tests and
# for people (hack/db.sh; data in ~/.cache/elasticdl-db). Prints the
# datasource URLs: eval "$$(make -s db-up)".
db-up:
	@hack/db.sh up

db-down:
	@hack/db.sh down

# An S3 server (SeaweedFS's gateway, built from the Go module proxy and
# cached: hack/s3.sh) on free ports of 127.0.0.1, for the object-storage
# tests and for people. Prints the AWS_* exports and ELASTICDL_S3_BUCKET:
# eval "$$(make -s s3-up)".
s3-up:
	@hack/s3.sh up

s3-down:
	@hack/s3.sh down
