package ax_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	ax "github.com/axsched/ax/clients/go"
)

// A submit carries the trace context of its context: an explicit one
// (WithTraceContext), else the OpenTelemetry span context of the caller's
// span. Every callback of the task then carries the trace id.
func ExampleWithTraceContext() {
	ctx := ax.WithTraceContext(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1")
	fmt.Println(ax.TraceContextFromContext(ctx))

	// With OpenTelemetry, the span the caller is in (here made by hand).
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
	})
	fmt.Println(ax.TraceContextFromContext(trace.ContextWithSpanContext(context.Background(), sc)))
	// Output:
	// 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 rojo=1
	// 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
}

// A handler's context carries the callback's trace context as the remote
// span context, so that a span started from it with OpenTelemetry
// continues the task's trace.
func ExampleDelivery_SpanContext() {
	d := &ax.Delivery{TaskID: "order|42", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-9a589cdc82dd450a-01"}
	sc := d.SpanContext()
	fmt.Println(sc.TraceID(), sc.SpanID(), sc.IsRemote(), sc.IsSampled(), d.TraceID())
	// Output:
	// 4bf92f3577b34da6a3ce929d0e0e4736 9a589cdc82dd450a true true 4bf92f3577b34da6a3ce929d0e0e4736
}
