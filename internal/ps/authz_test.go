package ps

import (
	"testing"

	"elasticdl/proto/pserverpb"
)

// Every method of the service has its callers: a method added to the
// proto without a row would be refused to everyone.
func TestPolicyCoversEveryMethod(t *testing.T) {
	for _, m := range pserverpb.Pserver_ServiceDesc.Methods {
		if len(callers()[m.MethodName]) == 0 {
			t.Errorf("PS method %s has no callers in the policy", m.MethodName)
		}
	}
	for _, s := range pserverpb.Pserver_ServiceDesc.Streams {
		t.Errorf("streaming PS method %s: the policy sees no request", s.StreamName)
	}
}
