"""Trains torchvision's SqueezeNet for a few steps under the placement placer found for it.
Usage: python train_placed.py runs/squeezenet/best_placement.yaml"""
import sys, torch, torchvision, placer_torch

torch.manual_seed(0)
model = torchvision.models.squeezenet1_1(num_classes=10)  # the module exported to ONNX
model = placer_torch.apply(model, sys.argv[1])  # then train as usual
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
images, labels = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))
for step in range(5):
    logits = model(images)
    loss = torch.nn.functional.cross_entropy(logits, labels.to(logits.device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
