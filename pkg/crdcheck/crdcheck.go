// Package crdcheck validates an object against its CustomResourceDefinition offline, as the
// API server does when the object is created: a field the schema does not have (what strict
// field validation refuses), the OpenAPI schema's types, enums, patterns, bounds and required
// fields once its defaults are in, and its CEL rules (x-kubernetes-validations). It reports
// every error at once, by field path, with the rule's own message. The code is the API
// server's (k8s.io/apiextensions-apiserver), so that a client's dry run refuses what the
// server would, from the same CRD.
package crdcheck

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Checker validates objects of one version of a CRD.
type Checker struct {
	structural *structuralschema.Structural
	schema     validation.SchemaValidator
	rules      *cel.Validator // nil: the schema has no CEL rules
}

// New is the Checker of version of crd.
func New(crd *apiextensionsv1.CustomResourceDefinition, version string) (*Checker, error) {
	var props *apiextensionsv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			props = v.Schema.OpenAPIV3Schema
		}
	}
	if props == nil {
		return nil, fmt.Errorf("CRD %s has no schema of version %s", crd.Name, version)
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
		return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, version, err)
	}
	structural, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, fmt.Errorf("CRD %s version %s: its schema is not structural: %w", crd.Name, version, err)
	}
	schema, _, err := validation.NewSchemaValidator(internal)
	if err != nil {
		return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, version, err)
	}
	return &Checker{structural: structural, schema: schema, rules: cel.NewValidator(structural, true, celconfig.PerCallLimit)}, nil
}

// Validate checks obj (an object as JSON decodes it: apiVersion, kind, metadata, spec) as the
// API server checks it on create, and returns every error. obj is left as it was.
func (c *Checker) Validate(ctx context.Context, obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	cp := runtime.DeepCopyJSON(obj)
	for _, path := range pruning.PruneWithOptions(cp, c.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		errs = append(errs, &field.Error{Type: field.ErrorTypeNotSupported, Field: path, BadValue: field.OmitValueType{},
			Detail: "unknown field: the API has no such field (a misspelling?)"})
	}
	structuraldefaulting.Default(cp, c.structural)
	errs = append(errs, validation.ValidateCustomResource(nil, cp, c.schema)...)
	if c.rules != nil {
		ruleErrs, _ := c.rules.Validate(ctx, nil, c.structural, cp, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, ruleErrs...)
	}
	return errs
}
