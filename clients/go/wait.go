package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record names (short) that end a run, and the status each gives it (runtime/log/records/status.py).
var ending = map[string]string{
	"RunCompleted":      "completed",
	"RunFailed":         "failed",
	"RunCancelled":      "cancelled",
	"RunParked":         "parked",
	"RunRejected":       "rejected",
	"RunContinuedAsNew": "continued_as_new",
}

// waitForEnd reads events partition home from offset start until the run's ending event.
//
// Fencing, as every agentlog reader does it: a claim (EpochClaimed, keyless) raises the
// partition's epoch watermark to its own offset, an admitted event to its epoch; an event whose
// epoch is below the watermark was written by a worker that had lost the partition and is not
// part of any run.
func waitForEnd(
	ctx context.Context, seeds []string, registry *registry, topic string, home int32, start int64, runID string,
) (map[string]any, error) {
	// agentlog's producers write LZ4-compressed batches; franz-go decompresses them (and gzip,
	// snappy, zstd) itself. A kafkajs consumer needs an LZ4 codec registered (docs/producers.md).
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {home: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	watermark := int64(-1)
	events := 0
	for {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for _, fetchErr := range fetches.Errors() {
			return nil, fmt.Errorf("reading %s[%d]: %w", fetchErr.Topic, fetchErr.Partition, fetchErr.Err)
		}
		var outcome map[string]any
		var decodeErr error
		fetches.EachRecord(func(record *kgo.Record) {
			if outcome != nil || decodeErr != nil || record.Value == nil {
				return
			}
			name, fields, err := registry.decode(ctx, record.Value)
			if err != nil {
				decodeErr = fmt.Errorf("%s[%d]@%d: %w", topic, home, record.Offset, err)
				return
			}
			short := name[strings.LastIndex(name, ".")+1:]
			if short == "EpochClaimed" {
				watermark = max(watermark, record.Offset)
				return
			}
			epoch, _ := fields["epoch"].(int64)
			if epoch < watermark {
				return // fenced
			}
			watermark = epoch
			if string(record.Key) != runID {
				return
			}
			events++
			status, ends := ending[short]
			if !ends {
				return
			}
			outcome = map[string]any{"run_id": runID, "status": status, "event": short, "events_read": events}
			switch short {
			case "RunCompleted":
				outcome["result"] = json.RawMessage(fields["result"].(string))
			case "RunFailed":
				outcome["reason"] = fmt.Sprintf("%v: %v", fields["error_type"], fields["error"])
			case "RunContinuedAsNew":
				outcome["continued_as"] = fields["new_run_id"]
			default:
				outcome["reason"] = fields["reason"]
			}
		})
		if decodeErr != nil {
			return nil, decodeErr
		}
		if outcome != nil {
			return outcome, nil
		}
	}
}
