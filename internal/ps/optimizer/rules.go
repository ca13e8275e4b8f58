package optimizer

import (
	"fmt"
	"math"
)

// SGD is Keras' SGD: plain gradient descent when Momentum is 0, otherwise
//
//	v = momentum*v - lr*g;  param += v                       (classic)
//	v = momentum*v - lr*g;  param += momentum*v - lr*g       (Nesterov)
//
// It backs both the "sgd" and "momentum" specs.
type SGD struct {
	base
	kind         string
	LearningRate float64
	Momentum     float64
	Nesterov     bool
}

// NewSGD returns an SGD optimizer; kind is "sgd" or "momentum" and only
// affects Name and String.
func NewSGD(kind string, lr, momentum float64, nesterov bool) (*SGD, error) {
	if err := checkLR(kind, lr); err != nil {
		return nil, err
	}
	if !(momentum >= 0) || math.IsInf(momentum, 0) {
		return nil, fmt.Errorf("optimizer %s: momentum %v must be finite and >= 0", kind, momentum)
	}
	o := &SGD{kind: kind, LearningRate: lr, Momentum: momentum, Nesterov: nesterov}
	if momentum != 0 {
		o.base = newBase(0, "momentum")
	} else {
		o.base = newBase(0)
	}
	return o, nil
}

// Name implements Optimizer.
func (o *SGD) Name() string { return o.kind }

func (o *SGD) String() string {
	return fmt.Sprintf("%s:learning_rate=%g,momentum=%g,nesterov=%t", o.kind, o.LearningRate, o.Momentum, o.Nesterov)
}

// Apply implements Optimizer.
func (o *SGD) Apply(name string, param, grad []float32, lrScale float32) error {
	return o.apply(name, param, grad, lrScale, func(st *state, p, g []float32, scale float64) {
		o.kernel(p, g, st.slots, scale)
	})
}

// ApplyRow implements RowOptimizer.
func (o *SGD) ApplyRow(param, grad []float32, slots [][]float32, step int64, lrScale float32) {
	o.kernel(param, grad, slots, float64(lrScale))
}

func (o *SGD) kernel(p, g []float32, slots [][]float32, scale float64) {
	lr := float32(o.LearningRate * scale)
	g = g[:len(p)] // lets the compiler drop bounds checks
	if o.Momentum == 0 {
		for i, gi := range g {
			p[i] -= lr * gi
		}
		return
	}
	m := float32(o.Momentum)
	v := slots[0][:len(p)]
	if o.Nesterov {
		for i, gi := range g {
			v[i] = m*v[i] - lr*gi
			p[i] += m*v[i] - lr*gi
		}
		return
	}
	for i, gi := range g {
		v[i] = m*v[i] - lr*gi
		p[i] += v[i]
	}
}

// Adam is Keras/TF2 Adam with TF's "epsilon hat" formulation: with t the
// parameter's own step count,
//
//	m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g²
//	lr_t = lr*sqrt(1-b2^t)/(1-b1^t);  param -= lr_t*m/(sqrt(v)+eps)
//
// With AMSGrad, vhat = max(vhat, v) replaces v in the denominator.
type Adam struct {
	base
	LearningRate, Beta1, Beta2, Epsilon float64
	AMSGrad                             bool
}

// NewAdam validates the hyper-parameters and returns an Adam optimizer.
func NewAdam(lr, beta1, beta2, epsilon float64, amsgrad bool) (*Adam, error) {
	if err := checkLR("adam", lr); err != nil {
		return nil, err
	}
	for _, b := range []struct {
		name string
		v    float64
	}{{"beta1", beta1}, {"beta2", beta2}} {
		if !(b.v >= 0 && b.v < 1) {
			return nil, fmt.Errorf("optimizer adam: %s %v must be in [0, 1)", b.name, b.v)
		}
	}
	if err := checkEpsilon("adam", epsilon); err != nil {
		return nil, err
	}
	o := &Adam{LearningRate: lr, Beta1: beta1, Beta2: beta2, Epsilon: epsilon, AMSGrad: amsgrad}
	if amsgrad {
		o.base = newBase(0, "m", "v", "vhat")
	} else {
		o.base = newBase(0, "m", "v")
	}
	return o, nil
}

// Name implements Optimizer.
func (o *Adam) Name() string { return "adam" }

func (o *Adam) String() string {
	return fmt.Sprintf("adam:learning_rate=%g,beta1=%g,beta2=%g,epsilon=%g,amsgrad=%t", o.LearningRate, o.Beta1, o.Beta2, o.Epsilon, o.AMSGrad)
}

// Apply implements Optimizer.
func (o *Adam) Apply(name string, param, grad []float32, lrScale float32) error {
	return o.apply(name, param, grad, lrScale, func(st *state, p, g []float32, scale float64) {
		o.kernel(p, g, st.slots, st.step, scale)
	})
}

// ApplyRow implements RowOptimizer: "lazy Adam", step is the row's own
// update count.
func (o *Adam) ApplyRow(param, grad []float32, slots [][]float32, step int64, lrScale float32) {
	o.kernel(param, grad, slots, step, float64(lrScale))
}

func (o *Adam) kernel(p, g []float32, slots [][]float32, step int64, scale float64) {
	t := float64(step)
	// Bias correction in float64: b^t underflows gracefully and 1-b^t
	// keeps its precision for small t.
	lrt := float32(o.LearningRate * scale * math.Sqrt(1-math.Pow(o.Beta2, t)) / (1 - math.Pow(o.Beta1, t)))
	// 1-b in float64 first: float32(0.999) is off by 1.3e-8, which would
	// be a 1.3e-5 relative error in 1-b2.
	c1, c2, eps := float32(1-o.Beta1), float32(1-o.Beta2), float32(o.Epsilon)
	g = g[:len(p)]
	m, v := slots[0][:len(p)], slots[1][:len(p)]
	var vhat []float32
	if o.AMSGrad {
		vhat = slots[2][:len(p)]
	} else if n := adamVector(p, g, m, v, lrt, c1, c2, eps); n > 0 {
		p, g, m, v = p[n:], g[n:], m[n:], v[n:]
	}
	for i := range p {
		gi := g[i]
		// TF's kernel form: m += (g-m)*(1-b1), the same as b1*m+(1-b1)*g.
		m[i] += (gi - m[i]) * c1
		v[i] += (gi*gi - v[i]) * c2
		den := v[i]
		if vhat != nil {
			den = max(vhat[i], v[i])
			vhat[i] = den
		}
		p[i] -= lrt * m[i] / (sqrt32(den) + eps)
	}
}

// Adagrad is Keras/TF2 Adagrad: acc += g²; param -= lr*g/(sqrt(acc)+eps),
// with the accumulator starting at InitialAccumulator.
type Adagrad struct {
	base
	LearningRate, InitialAccumulator, Epsilon float64
}

// NewAdagrad validates the hyper-parameters and returns an Adagrad optimizer.
func NewAdagrad(lr, initialAccumulator, epsilon float64) (*Adagrad, error) {
	if err := checkLR("adagrad", lr); err != nil {
		return nil, err
	}
	if !(initialAccumulator >= 0) || math.IsInf(initialAccumulator, 0) {
		return nil, fmt.Errorf("optimizer adagrad: initial_accumulator_value %v must be finite and >= 0", initialAccumulator)
	}
	if err := checkEpsilon("adagrad", epsilon); err != nil {
		return nil, err
	}
	return &Adagrad{
		base:               newBase(float32(initialAccumulator), "accumulator"),
		LearningRate:       lr,
		InitialAccumulator: initialAccumulator,
		Epsilon:            epsilon,
	}, nil
}

// Name implements Optimizer.
func (o *Adagrad) Name() string { return "adagrad" }

func (o *Adagrad) String() string {
	return fmt.Sprintf("adagrad:learning_rate=%g,initial_accumulator_value=%g,epsilon=%g", o.LearningRate, o.InitialAccumulator, o.Epsilon)
}

// Apply implements Optimizer.
func (o *Adagrad) Apply(name string, param, grad []float32, lrScale float32) error {
	return o.apply(name, param, grad, lrScale, func(st *state, p, g []float32, scale float64) {
		o.kernel(p, g, st.slots, scale)
	})
}

// ApplyRow implements RowOptimizer.
func (o *Adagrad) ApplyRow(param, grad []float32, slots [][]float32, step int64, lrScale float32) {
	o.kernel(param, grad, slots, float64(lrScale))
}

func (o *Adagrad) kernel(p, g []float32, slots [][]float32, scale float64) {
	lr, eps := float32(o.LearningRate*scale), float32(o.Epsilon)
	g = g[:len(p)]
	acc := slots[0][:len(p)]
	for i, gi := range g {
		acc[i] += gi * gi
		p[i] -= lr * gi / (sqrt32(acc[i]) + eps)
	}
}

func checkLR(kind string, lr float64) error {
	if !(lr > 0) || math.IsInf(lr, 0) {
		return fmt.Errorf("optimizer %s: learning_rate %v must be finite and > 0", kind, lr)
	}
	return nil
}

func checkEpsilon(kind string, eps float64) error {
	if !(eps >= 0) || math.IsInf(eps, 0) {
		return fmt.Errorf("optimizer %s: epsilon %v must be finite and >= 0", kind, eps)
	}
	return nil
}
