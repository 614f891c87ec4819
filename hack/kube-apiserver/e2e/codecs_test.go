package e2e

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

func tableCodecs() runtime.NegotiatedSerializer {
	return serializer.NewCodecFactory(runtime.NewScheme()).WithoutConversion()
}
