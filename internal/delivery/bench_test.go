package delivery_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/internal/redistest"
)

// BenchmarkRecordSent is the worker's cost per accepted send: one script
// call on a local redis-server.
func BenchmarkRecordSent(b *testing.B) {
	s, err := delivery.New(delivery.Options{Redis: redistest.Start(b).Client(b), Prefix: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	at := time.Now()
	b.ResetTimer()
	for i := range b.N {
		id := strconv.Itoa(i)
		if err := s.RecordSent(ctx, delivery.Sent{TaskID: "t" + id, Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "campaign",
			ProviderID: "SM" + id, Status: "sent", At: at}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdate is a callback's cost: two round trips.
func BenchmarkUpdate(b *testing.B) {
	s, err := delivery.New(delivery.Options{Redis: redistest.Start(b).Client(b), Prefix: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	at := time.Now()
	for i := range 1000 {
		id := strconv.Itoa(i)
		require.NoError(b, s.RecordSent(ctx, delivery.Sent{TaskID: "t" + id, Queue: "sms", Channel: "sms", Tenant: "acme", Campaign: "campaign", ProviderID: "SM" + id, Status: "sent", At: at}))
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Update(ctx, "sms", "SM"+strconv.Itoa(i%1000), delivery.Status{State: delivery.StateDelivered, At: at}); err != nil {
			b.Fatal(err)
		}
	}
}
