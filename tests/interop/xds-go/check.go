package main

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// The typed extensions an Envoy bootstrap or an xDS resource may carry in an Any, registered so
	// that protojson can read them and check() can open and validate them as Envoy does when it
	// builds the extension. An Any of a type not registered here is reported, as Envoy reports an
	// extension it does not know.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/client_side_weighted_round_robin/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/pick_first/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// validator is what protoc-gen-validate generates on every Envoy message: ValidateAll returns every
// violation of the message and of the messages inside it, except those inside an Any.
type validator interface {
	ValidateAll() error
}

const anyName = protoreflect.FullName("google.protobuf.Any")

// check validates message as Envoy does: its own rules (ValidateAll), then, since ValidateAll stops
// at an Any, the message inside every Any (typed_config, typed_extension_protocol_options, ...),
// recursively. It returns every violation, each prefixed by where it is; nil when there is none.
func check(message proto.Message) []string {
	var problems []string
	checkAt(message.ProtoReflect(), "", &problems)
	return problems
}

func checkAt(message protoreflect.Message, at string, problems *[]string) {
	if v, ok := message.Interface().(validator); ok {
		if err := v.ValidateAll(); err != nil {
			for _, one := range flatten(err) {
				*problems = append(*problems, prefixed(at, one.Error()))
			}
		}
	}
	walk(message, at, problems)
}

// walk finds the Any fields under message (through lists, maps and nested messages) and checks what
// each holds.
func walk(message protoreflect.Message, at string, problems *[]string) {
	message.Range(func(field protoreflect.FieldDescriptor, value protoreflect.Value) bool {
		if field.Kind() != protoreflect.MessageKind && field.Kind() != protoreflect.GroupKind {
			return true
		}
		name := joined(at, string(field.Name()))
		switch {
		case field.IsList():
			list := value.List()
			for i := 0; i < list.Len(); i++ {
				inner(list.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), problems)
			}
		case field.IsMap():
			if field.MapValue().Kind() != protoreflect.MessageKind {
				return true
			}
			value.Map().Range(func(key protoreflect.MapKey, entry protoreflect.Value) bool {
				inner(entry.Message(), fmt.Sprintf("%s[%q]", name, key.String()), problems)
				return true
			})
		default:
			inner(value.Message(), name, problems)
		}
		return true
	})
}

func inner(message protoreflect.Message, at string, problems *[]string) {
	if message.Descriptor().FullName() != anyName {
		walk(message, at, problems)
		return
	}
	packed, ok := message.Interface().(*anypb.Any)
	if !ok {
		*problems = append(*problems, prefixed(at, "an Any that is not a google.protobuf.Any"))
		return
	}
	opened, err := packed.UnmarshalNew()
	if err != nil {
		*problems = append(*problems, prefixed(at, fmt.Sprintf("cannot open Any of type %q: %v", packed.GetTypeUrl(), err)))
		return
	}
	checkAt(opened.ProtoReflect(), fmt.Sprintf("%s<%s>", at, opened.ProtoReflect().Descriptor().FullName()), problems)
}

// flatten splits protoc-gen-validate's MultiError (a list of errors behind AllErrors) into its
// violations.
func flatten(err error) []error {
	if multi, ok := err.(interface{ AllErrors() []error }); ok {
		var all []error
		for _, one := range multi.AllErrors() {
			all = append(all, flatten(one)...)
		}
		return all
	}
	var joinedErr interface{ Unwrap() []error }
	if errors.As(err, &joinedErr) {
		var all []error
		for _, one := range joinedErr.Unwrap() {
			all = append(all, flatten(one)...)
		}
		return all
	}
	return []error{err}
}

func joined(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

func prefixed(at, text string) string {
	if at == "" {
		return text
	}
	return at + ": " + text
}

// problemText is the one string a JSON line carries for a list of violations ("" for none).
func problemText(problems []string) string {
	return strings.Join(problems, "; ")
}
