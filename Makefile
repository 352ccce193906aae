# Developer shortcuts; each target is one plain go command, so nothing here is required.
.PHONY: build run test race vet fuzz bench bench-send bench-sync ci

build:
	go build -o bin/parley ./cmd/parley
	go build -o bin/parley-bench ./cmd/parley-bench

run:
	go run ./cmd/parley serve

test:
	go test -race ./...

vet:
	go vet ./...

# Run each fuzz target for a while (FUZZTIME=30s by default).
FUZZTIME ?= 30s
fuzz:
	go test ./internal/gateway -run '^$$' -fuzz FuzzDecodeFrame -fuzztime $(FUZZTIME)
	go test ./internal/gateway -run '^$$' -fuzz FuzzDecodeSendRequest -fuzztime $(FUZZTIME)
	go test ./internal/gateway -run '^$$' -fuzz FuzzAckReply -fuzztime $(FUZZTIME)
	go test ./internal/chat -run '^$$' -fuzz FuzzDecodePageKey -fuzztime $(FUZZTIME)
	go test ./protocol -run '^$$' -fuzz FuzzReadEventPush -fuzztime $(FUZZTIME)
	go test ./protocol -run '^$$' -fuzz FuzzReadMessage -fuzztime $(FUZZTIME)
	go test ./protocol -run '^$$' -fuzz FuzzReadAck -fuzztime $(FUZZTIME)
	go test ./protocol -run '^$$' -fuzz FuzzIsValue -fuzztime $(FUZZTIME)
	go test ./protocol -run '^$$' -fuzz FuzzAppendSendRequest -fuzztime $(FUZZTIME)
	go test ./protocol -run '^$$' -fuzz FuzzAppendString -fuzztime $(FUZZTIME)
	go test ./internal/chat -run '^$$' -fuzz FuzzAppendMessageJSON -fuzztime $(FUZZTIME)

bench:
	go test -run '^$$' -bench . -benchmem ./internal/...

# chat.Service.Send through each durable engine, 3 runs each: compare them with benchstat
# (docs/design.md, "Measuring the write path").
bench-send:
	go test -run '^$$' -bench Send -benchtime 3s -count 3 ./internal/store/pebble/
	go test -run '^$$' -bench Send -benchtime 3s -count 3 ./internal/store/sqlite/

# A reconnecting device's catch-up read (chat.Service.Sync over 10,000 events) on each engine.
bench-sync:
	go test -run '^$$' -bench Sync -count 3 ./internal/store/sqlite/
	go test -run '^$$' -bench Sync -count 3 ./internal/store/pebble/

ci:
	bash .ci/run
