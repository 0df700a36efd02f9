package harness

import (
	"math"
	"net/http"
	"testing"

	"github.com/anishathalye/porcupine"
)

// op is one operation of a hand-written history: client, [call, ret], in
// and out.
func op(client int, call, ret int64, in LinInput, out LinOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func waiting(status, v int) LinOutput { return LinOutput{Status: status, State: "WAITING", Payload: v} }
func cancelled(status, v int) LinOutput {
	return LinOutput{Status: status, State: "CANCELLED", Payload: v}
}

// The model accepts ax's answers in order and refuses histories that no
// order explains, per task id.
func TestLinModel(t *testing.T) {
	sub := func(id string, v int) LinInput { return LinInput{Kind: LinSubmit, ID: id, Payload: v} }
	get := func(id string) LinInput { return LinInput{Kind: LinGet, ID: id, Strong: true} }
	cases := []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"submit, same spec again, conflict, cancel, get", []porcupine.Operation{
			op(0, 0, 1, sub("a", 1), waiting(http.StatusCreated, 1)),
			op(0, 2, 3, sub("a", 1), waiting(http.StatusOK, 1)),
			op(0, 4, 5, sub("a", 2), LinOutput{Status: http.StatusConflict}),
			op(0, 6, 7, LinInput{Kind: LinCancel, ID: "a"}, cancelled(http.StatusOK, 1)),
			op(0, 8, 9, get("a"), cancelled(http.StatusOK, 1)),
		}, porcupine.Ok},
		{"replace overwrites a cancelled task", []porcupine.Operation{
			op(0, 0, 1, sub("a", 1), waiting(http.StatusCreated, 1)),
			op(0, 2, 3, LinInput{Kind: LinCancel, ID: "a"}, cancelled(http.StatusOK, 1)),
			op(0, 4, 5, LinInput{Kind: LinReplace, ID: "a", Payload: 3}, waiting(http.StatusCreated, 3)),
			op(0, 6, 7, get("a"), waiting(http.StatusOK, 3)),
		}, porcupine.Ok},
		{"a read after a finished submit finds nothing", []porcupine.Operation{
			op(0, 0, 1, sub("a", 1), waiting(http.StatusCreated, 1)),
			op(1, 2, 3, get("a"), LinOutput{Status: http.StatusNotFound}),
		}, porcupine.Illegal},
		{"overlapping read may come first", []porcupine.Operation{
			op(0, 0, 3, sub("a", 1), waiting(http.StatusCreated, 1)),
			op(1, 1, 2, get("a"), LinOutput{Status: http.StatusNotFound}),
		}, porcupine.Ok},
		{"a write of unknown outcome may take effect late", []porcupine.Operation{
			op(0, 0, math.MaxInt64, sub("a", 1), LinOutput{Unknown: true}),
			op(1, 1, 2, get("a"), LinOutput{Status: http.StatusNotFound}),
			op(1, 3, 4, get("a"), waiting(http.StatusOK, 1)),
		}, porcupine.Ok},
		{"other ids do not explain a read", []porcupine.Operation{
			op(0, 0, 1, sub("a", 1), waiting(http.StatusCreated, 1)),
			op(1, 2, 3, get("b"), waiting(http.StatusOK, 1)),
		}, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := porcupine.CheckOperationsVerbose(LinModel, tc.history, 0); got != tc.want {
				t.Errorf("porcupine says %v, want %v", got, tc.want)
			}
		})
	}
}
