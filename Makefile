# Entry points for people; CI runs hack/test.sh through `make test`.
TAGS ?= $(shell hack/blas-tags.sh)

.PHONY: build train test bench proto
build:
	go build -tags "$(TAGS)" -o bin/elasticdl ./cmd/elasticdl

train:
	hack/train.sh

test:
	hack/test.sh

bench:
	bench/run.sh

proto:
	proto/gen.sh
