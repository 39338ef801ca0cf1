package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/tidwall/gjson"
)

// generateRequest is the lesson's own request shape: a prompt, and
// optionally a provider to pin.
type generateRequest struct {
	Prompt   string `json:"prompt"`
	Provider string `json:"provider,omitempty"`
}

// generateResponse shows what the lesson measures: attempts, queue wait
// and latency as separate numbers.
type generateResponse struct {
	Provider    string  `json:"provider"`
	Model       string  `json:"model"`
	Text        string  `json:"text"`
	Attempts    int     `json:"attempts"`
	QueueWaitMS float64 `json:"queue_wait_ms"`
	LatencyMS   float64 `json:"latency_ms"`
}

// parseGenerate reads {"prompt": "...", "provider": "..."} as strictly as a
// chat request: exact key names, each once, strings only, nothing else.
// "auto" as a provider means any, as it does for a chat model.
func parseGenerate(body []byte) (generateRequest, *chatapi.Error) {
	bad := func(param, msg string) (generateRequest, *chatapi.Error) {
		return generateRequest{}, chatapi.InvalidRequest.New(msg).At(param)
	}
	if !chatapi.ValidJSON(body) || !gjson.ParseBytes(body).IsObject() {
		return bad("", `the body must be a JSON object: {"prompt": "...", "provider": "optional provider name"}`)
	}
	var (
		req  generateRequest
		seen = map[string]bool{}
		e    *chatapi.Error
	)
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str != "prompt" && k.Str != "provider":
			_, e = bad(k.Str, fmt.Sprintf("unknown field %q (want prompt, provider)", k.Str))
		case seen[k.Str]:
			_, e = bad(k.Str, fmt.Sprintf("%q appears more than once", k.Str))
		case v.Type != gjson.String:
			_, e = bad(k.Str, k.Str+" must be a string")
		case k.Str == "prompt":
			req.Prompt = v.Str
		default:
			req.Provider = v.Str
		}
		seen[k.Str] = true
		return e == nil
	})
	if e != nil {
		return generateRequest{}, e
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return generateRequest{}, chatapi.MissingPrompt.New("prompt is required").At("prompt")
	}
	if req.Provider == router.AutoModel {
		req.Provider = ""
	}
	return req, nil
}

// generate is POST /v1/generate: the prompt goes to the router as a chat
// request of one user message, and the answer comes back as its text with
// the numbers the lesson measures.
func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	id, r, buf, release, ok := s.accept(w, r)
	if !ok {
		return
	}
	var served error // the router's answer, for the gate (see accept)
	defer func() { release(served) }()
	body, e := parseGenerate(buf.Bytes())
	if e != nil {
		s.writeError(w, e)
		return
	}
	req := router.Request{Tenant: id.Key, Provider: body.Provider, Chat: chatapi.NewRequest(body.Prompt, false)}
	if body.Provider != "" && !s.opts.Router.HasProvider(body.Provider) {
		s.writeError(w, chatapi.ModelNotFound.New(fmt.Sprintf("the provider %q does not exist here; GET /v1/models lists them", body.Provider)).At("provider"))
		return
	}
	r, done, ok := s.admit(w, r, id, tenant.Admission{Model: body.Provider, BodyBytes: buf.Len()}, &req)
	if !ok {
		return
	}
	resp, err := s.opts.Router.Generate(r.Context(), req)
	served = err
	defer settled(w, done, resp.Usage, err)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	answer, _, _ := chatapi.ReadAnswer(resp.Provider, resp.Raw) // an answer is a completion: the router had it from a provider
	s.writeDeadline(w)
	writeJSON(w, http.StatusOK, generateResponse{Provider: resp.Provider, Model: resp.Model, Text: answer.Text, Attempts: resp.Attempts,
		QueueWaitMS: ms(resp.QueueWait), LatencyMS: ms(resp.Latency)})
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string       `json:"object"`
	Data   []modelEntry `json:"data"`
}

// models is GET /v1/models: "auto", every route's public name, every provider.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := s.identify(w, r); !ok {
		return // the list is no one's business but a caller's
	}
	list := modelList{Object: "list", Data: []modelEntry{{ID: router.AutoModel, Object: "model", OwnedBy: "gateway"}}}
	for _, r := range s.opts.Router.Routes() {
		list.Data = append(list.Data, modelEntry{ID: r.Name, Object: "model", OwnedBy: "gateway"})
	}
	for _, p := range s.opts.Router.Providers() {
		list.Data = append(list.Data, modelEntry{ID: p, Object: "model", OwnedBy: p})
	}
	writeJSON(w, http.StatusOK, list)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
