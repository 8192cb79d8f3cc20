package golang

import (
	"fmt"
	"strings"

	. "github.com/dave/jennifer/jen"

	"github.com/fila-mq/fila/gen/internal/spec"
)

const faultPath = "github.com/fila-mq/fila/broker/internal/fault"

// Broker renders broker/internal/server's codes_gen.go and
// codes_gen_test.go: the mapping from the broker's error values
// (broker/internal/fault, written by hand) to wire codes. Every non-OK code
// is mapped, so a code without a fault value does not compile.
func Broker(s *spec.Spec) map[string]*File {
	f := newFile("server")
	d := Dict{}
	for _, c := range s.Codes {
		if c.Scope == spec.ScopeOK {
			continue
		}
		d[Qual(faultPath, "Err"+spec.GoName(c.Name))] = Qual(WirePath, "Code"+spec.GoName(c.Name))
	}
	f.Comment("faultCodes maps every broker error value to its wire code.")
	f.Var().Id("faultCodes").Op("=").Map(Op("*").Qual(faultPath, "Error")).Qual(WirePath, "Code").Values(d)

	f.Comment("CodeOf returns the wire code of an error returned inside the broker: the code of")
	f.Comment("the first *fault.Error in its chain, CodeOK for nil, CodeInternal for an error")
	f.Comment("that carries no fault value.")
	f.Func().Id("CodeOf").Params(Id("err").Error()).Qual(WirePath, "Code").Block(
		If(Id("err").Op("==").Nil()).Block(Return(Qual(WirePath, "CodeOK"))),
		Var().Id("fe").Op("*").Qual(faultPath, "Error"),
		If(Qual("errors", "As").Call(Id("err"), Op("&").Id("fe"))).Block(
			If(List(Id("c"), Id("ok")).Op(":=").Id("faultCodes").Index(Id("fe")), Id("ok")).Block(Return(Id("c"))),
		),
		Return(Qual(WirePath, "CodeInternal")),
	)

	t := newFile("server")
	var cases []Code
	for _, c := range s.Codes {
		if c.Scope == spec.ScopeOK {
			continue
		}
		cases = append(cases, Values(Qual(faultPath, "Err"+spec.GoName(c.Name)), Qual(WirePath, "Code"+spec.GoName(c.Name))))
	}
	t.Comment("TestCodeOfEveryCode checks that every code of the spec maps from its broker")
	t.Comment("error value, bare and wrapped.")
	t.Func().Id("TestCodeOfEveryCode").Params(Id("t").Op("*").Qual("testing", "T")).Block(
		For(List(Id("_"), Id("tc")).Op(":=").Range().Index().Struct(
			Id("err").Op("*").Qual(faultPath, "Error"),
			Id("code").Qual(WirePath, "Code"),
		).Values(cases...)).Block(
			If(Id("got").Op(":=").Id("CodeOf").Call(Id("tc").Dot("err")), Id("got").Op("!=").Id("tc").Dot("code")).Block(
				Id("t").Dot("Errorf").Call(Lit("CodeOf(%v) = %v; want %v"), Id("tc").Dot("err"), Id("got"), Id("tc").Dot("code")),
			),
			Id("wrapped").Op(":=").Qual("fmt", "Errorf").Call(Lit("context: %w"), Id("tc").Dot("err")),
			If(Id("got").Op(":=").Id("CodeOf").Call(Id("wrapped")), Id("got").Op("!=").Id("tc").Dot("code")).Block(
				Id("t").Dot("Errorf").Call(Lit("CodeOf(%v) = %v; want %v"), Id("wrapped"), Id("got"), Id("tc").Dot("code")),
			),
		),
		If(Id("got").Op(":=").Id("CodeOf").Call(Qual("errors", "New").Call(Lit("plain"))), Id("got").Op("!=").Qual(WirePath, "CodeInternal")).Block(
			Id("t").Dot("Errorf").Call(Lit("CodeOf(plain error) = %v; want INTERNAL"), Id("got")),
		),
	)
	return map[string]*File{"codes_gen.go": f, "codes_gen_test.go": t}
}

// SDK renders sdk/go's errors_gen.go and errors_gen_test.go: one error type
// per operation that has domain codes, carrying only those codes, and the
// mapping from wire codes to the SDK's sentinel errors (written by hand in
// sdk/go/errors.go), so a code without a sentinel does not compile.
func SDK(s *spec.Spec) map[string]*File {
	f := newFile("fila")

	var sentCases []Code
	for _, c := range s.Codes {
		if c.Scope == spec.ScopeOK {
			continue
		}
		sentCases = append(sentCases, Case(Qual(WirePath, "Code"+spec.GoName(c.Name))).Block(Return(Id("Err"+spec.GoName(c.Name)))))
	}
	f.Comment("sentinel returns the sentinel error of a wire code; nil for OK or an unknown code.")
	f.Func().Id("sentinel").Params(Id("c").Qual(WirePath, "Code")).Error().Block(
		Switch(Id("c")).Block(sentCases...),
		Return(Nil()),
	)

	var opCases []Code
	for _, op := range s.Operations {
		if len(op.Codes) == 0 {
			continue
		}
		codeType := op.Name + "Code"
		errType := op.Name + "Error"
		verb := opVerb(op.Name)

		f.Comment(fmt.Sprintf("%s is a domain error code that %s can return.", codeType, op.Name))
		f.Type().Id(codeType).Uint16()
		var defs []Code
		var names []string
		for _, name := range op.Codes {
			c := s.Code(name)
			id := op.Name + spec.GoName(name)
			names = append(names, id)
			defs = append(defs, docComment(id, c.Doc), Id(id).Id(codeType).Op("=").Lit(c.Value))
		}
		f.Const().Defs(defs...)
		f.Comment("String returns the spec name of the code, such as QUEUE_NOT_FOUND.")
		f.Func().Params(Id("c").Id(codeType)).Id("String").Params().String().Block(
			Return(Qual(WirePath, "Code").Parens(Id("c")).Dot("String").Call()),
		)

		f.Add(comments(fmt.Sprintf("%s is a domain failure of %s; Code is one of %s. Other failures of %s are *StatusError. errors.Is matches the code's sentinel, such as Err%s.",
			errType, op.Name, strings.Join(names, ", "), op.Name, spec.GoName(op.Codes[0]))))
		f.Type().Id(errType).Struct(
			Id("Code").Id(codeType),
			Comment("Target is what the failure concerns: a queue name, a key ID; may be empty."),
			Id("Target").String(),
			Comment("Message is the broker's detail."),
			Id("Message").String(),
		)
		f.Func().Params(Id("e").Op("*").Id(errType)).Id("Error").Params().String().Block(
			Return(Id("formatError").Call(Lit(verb), Id("e").Dot("Target"), Qual(WirePath, "Code").Parens(Id("e").Dot("Code")), Id("e").Dot("Message"))),
		)
		f.Comment("Is reports whether target is the sentinel of e's code.")
		f.Func().Params(Id("e").Op("*").Id(errType)).Id("Is").Params(Id("target").Error()).Bool().Block(
			Return(Id("target").Op("==").Id("sentinel").Call(Qual(WirePath, "Code").Parens(Id("e").Dot("Code")))),
		)

		var codeCases []Code
		for _, name := range op.Codes {
			codeCases = append(codeCases, Qual(WirePath, "Code"+spec.GoName(name)))
		}
		opCases = append(opCases, Case(Qual(WirePath, "Op"+op.Request)).Block(
			Switch(Id("c")).Block(
				Case(codeCases...).Block(Return(Op("&").Id(errType).Values(Dict{
					Id("Code"):    Id(codeType).Parens(Id("c")),
					Id("Target"):  Id("target"),
					Id("Message"): Id("msg"),
				}))),
			),
		))
	}
	f.Comment("opError returns the error for code c answering request op: the operation's own")
	f.Comment("error type for its domain codes, *StatusError for everything else.")
	f.Func().Id("opError").Params(Id("op").Qual(WirePath, "Opcode"), Id("c").Qual(WirePath, "Code"), List(Id("target"), Id("msg"), Id("leaderHint")).String()).Error().Block(
		Switch(Id("op")).Block(opCases...),
		Return(Op("&").Id("StatusError").Values(Dict{
			Id("Code"):       Id("c"),
			Id("Op"):         Id("opVerb").Call(Id("op")),
			Id("Target"):     Id("target"),
			Id("Message"):    Id("msg"),
			Id("LeaderHint"): Id("leaderHint"),
		})),
	)

	var verbCases []Code
	for _, op := range s.Operations {
		verbCases = append(verbCases, Case(Qual(WirePath, "Op"+op.Request)).Block(Return(Lit(opVerb(op.Name)))))
	}
	f.Comment("opVerb names a request's operation in error messages, such as \"enqueue\".")
	f.Func().Id("opVerb").Params(Id("op").Qual(WirePath, "Opcode")).String().Block(
		Switch(Id("op")).Block(verbCases...),
		Return(Qual("strings", "ToLower").Call(Id("op").Dot("String").Call())),
	)

	// Tests: every (operation, code) pair.
	t := newFile("fila")
	var rows []Code
	for _, op := range s.Operations {
		for _, name := range op.Codes {
			rows = append(rows, Values(Dict{
				Id("op"):   Qual(WirePath, "Op"+op.Request),
				Id("code"): Qual(WirePath, "Code"+spec.GoName(name)),
				Id("sent"): Id("Err" + spec.GoName(name)),
				Id("check"): Func().Params(Id("err").Error()).Bool().Block(
					Var().Id("e").Op("*").Id(op.Name+"Error"),
					Return(Qual("errors", "As").Call(Id("err"), Op("&").Id("e")).Op("&&").Id("e").Dot("Code").Op("==").Id(op.Name+spec.GoName(name))),
				),
			}))
		}
		for _, c := range s.CodesByScope(spec.ScopeStatus) {
			rows = append(rows, Values(Dict{
				Id("op"):   Qual(WirePath, "Op"+op.Request),
				Id("code"): Qual(WirePath, "Code"+spec.GoName(c.Name)),
				Id("sent"): Id("Err" + spec.GoName(c.Name)),
				Id("check"): Func().Params(Id("err").Error()).Bool().Block(
					Var().Id("e").Op("*").Id("StatusError"),
					Return(Qual("errors", "As").Call(Id("err"), Op("&").Id("e")).Op("&&").Id("e").Dot("Code").Op("==").Qual(WirePath, "Code"+spec.GoName(c.Name))),
				),
			}))
		}
	}
	t.Comment("TestOpErrorEveryPair maps every (operation, code) pair of the spec: domain")
	t.Comment("codes to the operation's own error type, status codes to *StatusError, and")
	t.Comment("each to its sentinel with errors.Is.")
	t.Func().Id("TestOpErrorEveryPair").Params(Id("t").Op("*").Qual("testing", "T")).Block(
		For(List(Id("_"), Id("tc")).Op(":=").Range().Index().Struct(
			Id("op").Qual(WirePath, "Opcode"),
			Id("code").Qual(WirePath, "Code"),
			Id("sent").Error(),
			Id("check").Func().Params(Error()).Bool(),
		).Values(rows...)).Block(
			Id("err").Op(":=").Id("opError").Call(Id("tc").Dot("op"), Id("tc").Dot("code"), Lit("q"), Lit("detail"), Lit("")),
			If(Op("!").Id("tc").Dot("check").Call(Id("err"))).Block(
				Id("t").Dot("Errorf").Call(Lit("opError(%v, %v) = %T %v; wrong type or code"), Id("tc").Dot("op"), Id("tc").Dot("code"), Id("err"), Id("err")),
			),
			If(Op("!").Qual("errors", "Is").Call(Id("err"), Id("tc").Dot("sent"))).Block(
				Id("t").Dot("Errorf").Call(Lit("errors.Is(opError(%v, %v), %v) = false"), Id("tc").Dot("op"), Id("tc").Dot("code"), Id("tc").Dot("sent")),
			),
		),
	)
	return map[string]*File{"errors_gen.go": f, "errors_gen_test.go": t}
}

// opVerb turns an operation name into the lower-case words used in error
// messages: CreateQueue is "create queue".
func opVerb(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}
