import os
os.environ.setdefault('KGQA_PROGRESS', '0')
os.environ.setdefault('HF_HUB_OFFLINE', '1')
