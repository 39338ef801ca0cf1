package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const trace = `> goroutine(1): github.com/production-go/gateway-lab/gateway/httpapi.New()
>> goroutine(1): github.com/production-go/gateway-lab/gateway/httpapi.New => ()
> goroutine(5): github.com/production-go/gateway-lab/gateway/httpapi.(*Server).ServeHTTP(0x1)
> goroutine(5): github.com/production-go/gateway-lab/gateway/chatapi.Parse("x")
>> goroutine(5): github.com/production-go/gateway-lab/gateway/chatapi.Parse => (nil)
> goroutine(5): github.com/production-go/gateway-lab/gateway/router.(*Router).Generate(0x2)
> goroutine(7): github.com/production-go/gateway-lab/gateway/llm.Call(0x3)
> goroutine(7): github.com/production-go/gateway-lab/gateway/chatapi.Usage.Total(0x3)
>> goroutine(7): github.com/production-go/gateway-lab/gateway/chatapi.Usage.Total => (3)
>> goroutine(7): github.com/production-go/gateway-lab/gateway/llm.Call => (nil)
>> goroutine(5): github.com/production-go/gateway-lab/gateway/router.(*Router).Generate => (nil)
> goroutine(5): github.com/production-go/gateway-lab/gateway/chatapi.Write(0x4)
>> goroutine(5): github.com/production-go/gateway-lab/gateway/chatapi.Write => ()
>> goroutine(5): github.com/production-go/gateway-lab/gateway/httpapi.(*Server).ServeHTTP => ()
> goroutine(5): github.com/production-go/gateway-lab/gateway/router.(*Router).Close()
`

func TestAWalkCountsStaysRoomsAndReturns(t *testing.T) {
	w, err := Read(strings.NewReader(trace), "gateway/httpapi.(*Server).ServeHTTP")
	require.NoError(t, err)
	assert.Equal(t, []string{"gateway/httpapi", "gateway/chatapi", "gateway/httpapi", "gateway/router", "gateway/llm", "gateway/chatapi", "gateway/llm", "gateway/httpapi", "gateway/chatapi", "gateway/httpapi"}, w.Stays,
		"a goroutine the request started walks on from where it began; what comes after ServeHTTP returns is not the request's")
	assert.Equal(t, []string{"gateway/httpapi", "gateway/chatapi", "gateway/router", "gateway/llm"}, w.Rooms)
	assert.Equal(t, 6, w.Returns())
}

func TestATraceWithoutTheRequestIsAnError(t *testing.T) {
	_, err := Read(strings.NewReader(trace), "gateway/httpapi.(*Server).Nothing")
	assert.ErrorContains(t, err, "no call of")
}
