package chatapi_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheCatalogueListsEveryFailureOnceWithOneCode: Catalogue holds every
// Failure catalogue.go declares, each code names one failure, and each
// failure's type agrees with its status.
func TestTheCatalogueListsEveryFailureOnceWithOneCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "catalogue.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	declared := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.CompositeLit); ok {
					if id, ok := lit.Type.(*ast.Ident); ok && id.Name == "Failure" {
						declared++
					}
				}
			}
		}
	}
	assert.Len(t, chatapi.Catalogue, declared, "Catalogue lists every failure catalogue.go declares")
	codes := map[string]bool{}
	for _, c := range chatapi.Catalogue {
		assert.False(t, codes[c.Code], "%s names one failure", c.Code)
		codes[c.Code] = true
		switch {
		case c.Status == http.StatusTooManyRequests:
			assert.Equal(t, chatapi.RateLimitError, c.Type, c.Code)
		case c.Status >= 500 || c.Status == chatapi.StatusClientClosed:
			assert.Equal(t, chatapi.ServerError, c.Type, c.Code)
		default:
			assert.Equal(t, chatapi.InvalidRequestError, c.Type, c.Code)
		}
	}
}

func TestAFailureMakesTheErrorItNames(t *testing.T) {
	e := chatapi.TokensPerMinute.New("over").At("model").After(1500 * time.Millisecond)
	assert.Equal(t, &chatapi.Error{Status: 429, Type: "rate_limit_error", Code: "tokens_per_minute", Param: "model", Message: "over", RetryAfter: 1500 * time.Millisecond}, e)
	assert.True(t, chatapi.TokensPerMinute.Is(e))
	assert.False(t, chatapi.RateLimited.Is(e), "another code of the same status and type is another failure")
	assert.JSONEq(t, `{"error":{"message":"over","type":"rate_limit_error","param":"model","code":"tokens_per_minute"}}`, string(e.JSON()))
}
